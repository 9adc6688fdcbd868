"""The trained weights of the book's German-to-English translator: files, no code.

Load them with `transformer_book.Translator.pretrained()`; `record.json` says how they were made.
"""
