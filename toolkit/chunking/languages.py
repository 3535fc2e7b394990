"""The programming languages the ``code`` strategy knows: where a definition starts in each, and the file extensions
that name them (the spec's ``language=`` option is checked against these names)."""

# Lines that start a definition, per language; the recursive fallback cuts before them first.
DEFINITION_KEYWORDS = {
    "python": r"@|(?:async\s+)?def\b|class\b",  # Python that does not parse falls back to these
    "javascript": r"(?:export\s+)?(?:default\s+)?(?:async\s+)?(?:function|class)\b"
    r"|(?:export\s+)?const\s+\w+\s*=",
    "typescript": r"(?:export\s+)?(?:default\s+)?(?:async\s+)?(?:function|class|interface|type|enum)\b"
    r"|(?:export\s+)?const\s+\w+\s*=",
    "go": r"func\b|type\b",
    "rust": r"(?:pub(?:\(\w+\))?\s+)?(?:async\s+)?(?:fn|impl|struct|enum|trait|mod)\b",
    "java": r"(?:public|private|protected|static|final|abstract|\s)*"
    r"(?:class|interface|enum|record|[\w<>\[\]]+\s+\w+\s*\()",
    "c": r"[A-Za-z_][\w\s\*]*\s\**\w+\s*\([^;]*$",
    "cpp": r"(?:class|struct|namespace|template)\b|[A-Za-z_][\w\s\*:<>]*\s\**[\w:]+\s*\([^;]*$",
    "ruby": r"(?:def|class|module)\b",
    "php": r"(?:(?:public|private|protected|static|abstract|final)\s+)*(?:function|class|interface|trait)\b",
    "shell": r"(?:function\s+)?\w+\s*\(\)\s*\{",
}
EXTENSIONS = {
    ".py": "python", ".pyi": "python", ".js": "javascript", ".mjs": "javascript", ".jsx": "javascript",
    ".ts": "typescript", ".tsx": "typescript", ".go": "go", ".rs": "rust", ".java": "java", ".c": "c",
    ".h": "c", ".cc": "cpp", ".cpp": "cpp", ".hpp": "cpp", ".rb": "ruby", ".php": "php", ".sh": "shell",
}  # fmt: skip
