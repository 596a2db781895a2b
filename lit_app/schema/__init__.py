"""What a request may say: the field names and LIT specs (fields), the methods the LIT layer serves
(method_registry) and the parsing of each model input (inputs). Imports only lit_app/errors.py."""
