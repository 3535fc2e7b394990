"""Text in and out: reading source files (PDFs included) and counting cl100k_base tokens."""
