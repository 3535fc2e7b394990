"""The values a user gives, checked before anything is written: one rule per kind of number (batch sizes,
rates, prices, dimensions, k) and one check for text that PostgreSQL cannot store.

The library functions call these rules; the command line uses the same rules as click parameter types
(toolkit.cli._params), so a bad value is refused with the same sentence either way, as a usage error there.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import timedelta

from toolkit.errors import InputError


def _figure(value: float) -> str:
    """A bound as people write it: 10,000 or 0.5, never 10000.0."""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:,}"


def shown(value) -> str:
    """A value quoted back in a message: repr keeps NUL bytes and undecodable bytes visible and printable."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "…"


@dataclass(frozen=True)
class NumberRule:
    """What a numeric value may be: whole or not, and its range. ``check`` returns the value or raises
    ``InputError`` with one sentence; NaN, infinities and booleans are never numbers here."""

    what: str
    minimum: float
    maximum: float
    whole: bool = True
    above_minimum: bool = False
    hint: str = ""

    def describe(self) -> str:
        kind = "a whole number" if self.whole else "a number"
        if self.above_minimum:
            return f"{kind} above {_figure(self.minimum)} and at most {_figure(self.maximum)}"
        return f"{kind} from {_figure(self.minimum)} to {_figure(self.maximum)}"

    def refuse(self, value) -> InputError:
        hint = f"; {self.hint}" if self.hint else ""
        return InputError(f"{self.what[0].upper()}{self.what[1:]} must be {self.describe()}, not {shown(value)}{hint}.")

    def check(self, value):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.refuse(value)
        if isinstance(value, float):
            if not math.isfinite(value) or (self.whole and not value.is_integer()):
                raise self.refuse(value)
            if self.whole:
                value = int(value)
        low_ok = value > self.minimum if self.above_minimum else value >= self.minimum
        if not low_ok or value > self.maximum:
            raise self.refuse(value)
        return value

    def check_optional(self, value):
        """``None`` means the option was not given (no limit, the default); anything else is checked."""
        return None if value is None else self.check(value)

    def parse(self, text: str):
        """A number typed by a user ("64", "0.5", "1e3"), checked."""
        cleaned = str(text).strip().replace("_", "")
        try:
            number = int(cleaned) if self.whole else float(cleaned)
        except ValueError:
            if not self.whole:
                raise self.refuse(text) from None
            try:  # "1e3" is a whole number written as a float
                number = float(cleaned)
            except ValueError:
                raise self.refuse(text) from None
        if not self.whole and _underflows(cleaned, number):
            raise self.refuse(text)  # 1e-400 is not 0: it is a typo, not "off"
        try:
            return self.check(number)
        except InputError:
            raise self.refuse(text) from None  # quote what was typed, not its conversion


def _underflows(typed: str, number) -> bool:
    """True when ``typed`` names a non-zero number that a float reads as 0 or as a subnormal (1e-400, 1e-310)."""
    if isinstance(number, int) or number != number or abs(number) >= 2.2250738585072014e-308:
        return False
    mantissa = typed.lower().split("e")[0]
    return any(digit in "123456789" for digit in mantissa)


# One rule per kind of value; the bounds are where a larger value is a typo, not a plan.
BATCH_DOCUMENTS = NumberRule("the ingest batch size (documents per transaction)", 1, 10_000)
BATCH_ROWS = NumberRule("the backfill batch size (rows per embedding batch)", 1, 10_000)
WORKERS = NumberRule("the number of embedding workers", 1, 64)
REQUESTS_PER_MINUTE = NumberRule(
    "the request rate (requests per minute)", 0, 1e9, whole=False, above_minimum=True, hint="omit it for no limit"
)
TOKENS_PER_MINUTE = NumberRule(
    "the token rate (tokens per minute)", 0, 1e12, whole=False, above_minimum=True, hint="omit it for no limit"
)
COST_LIMIT = NumberRule("the cost limit (USD)", 0, 1e9, whole=False, hint="omit it for no limit")
PRICE = NumberRule("the price (USD per million tokens)", 0, 1e6, whole=False)
DIMENSIONS = NumberRule("the number of dimensions", 1, 16_000, hint="pgvector stores at most 16,000")
MAX_INPUT_TOKENS = NumberRule("the input token limit", 1, 10_000_000)
# toolkit.search_max_k() in SQL; toolkit.search.MAX_K is this bound, and a test keeps the two equal.
RESULTS = NumberRule("the number of chunks retrieved per query (k)", 1, 1000)
EF_SEARCH = NumberRule("hnsw.ef_search", 1, 1000)
# toolkit shadow searches each question twice (once per version) at k, up to 500 logged questions, and a passages
# search's cost grows faster than k (the sample corpus on a busy 2-core machine: 0.1 s a question at k 5, 1.7 s at
# 20, 6.1 s at 50; -k 251 ran for minutes): past the first 20 hits, overlap@k says nothing a person acts on.
SHADOW_K = NumberRule(
    "the number of results compared per question (k)", 1, 20, hint="each question is searched on both versions at k"
)
PASSAGE_TOKENS = NumberRule("the passages' token budget (max_tokens)", 1, 10_000_000)
# toolkit._check_search_options in SQL refuses the same (a test keeps the two equal).
MIN_SCORE = NumberRule(
    "the score threshold (min_score)", -1, 1, whole=False, hint="it is a cosine similarity of question and chunk"
)
DIVERSITY = NumberRule("the diversity (MMR lambda)", 0, 1, whole=False, hint="0 is off, 1 is as diverse as it gets")
RECALL = NumberRule("the recall floor", 0, 1, whole=False, hint="recall@k is a share of the queries")
QUERY_SET_SIZE = NumberRule("the smallest query set", 1, 1_000_000)
RECALL_DROP = NumberRule("the allowed recall drop", 0, 1, whole=False, hint="recall@k is a share of the queries")
CHUNK_TOKENS = NumberRule("the chunk size (tokens)", 1, 1_000_000)
OVERLAP_TOKENS = NumberRule("the overlap", 0, 1_000_000)
PROMPT_TOKENS = NumberRule("the token count", 0, 10_000_000)
WORDS_PER_PAGE = NumberRule("the words per page", 0, 100_000, whole=False, above_minimum=True)
TOKENS_PER_WORD = NumberRule("the tokens per word", 0, 100, whole=False, above_minimum=True)
VERSION_NUMBER = NumberRule("the version number", 1, 2_147_483_647)
RETENTION_DAYS = NumberRule("the rollback window (days)", 0, 36_500, whole=False)
LOOKBACK_DAYS = NumberRule("how far back to look (days)", 0, 36_500, whole=False)
LOG_RETENTION_DAYS = NumberRule("the query-log retention (days)", 0, 36_500, whole=False)
CANARY_PERCENT = NumberRule("the canary share (percent of request keys)", 0, 100, whole=False)
SAMPLE_RATE = NumberRule("the sample rate (share of questions)", 0, 1, whole=False, hint="0 turns the log off")
HNSW_M = NumberRule("HNSW m", 2, 100, hint="pgvector's range")
MEMORY_BYTES = NumberRule("the memory size (bytes)", 1, 1e18, hint="that is more than any server holds")
CORPUS_COUNT = NumberRule("the count", 0, 1e15, hint="that is more than any corpus holds")
# What one file may cost to read (toolkit.text.sources.ReadLimits): sizes in bytes, times in seconds.
FILE_BYTES = NumberRule("the file size limit (bytes)", 1, 1e15)
PDF_SECONDS = NumberRule("the PDF time limit (seconds per document)", 0, 86_400, whole=False, above_minimum=True)
PDF_MEMORY_BYTES = NumberRule(
    "the PDF memory limit (bytes)", 100_000_000, 1e15, hint="the reading process needs about 70 MB to start"
)
PDF_PAGES = NumberRule("the PDF page limit", 1, 100_000_000)
PDF_GLYPHS = NumberRule("the PDF glyph limit (glyphs per page)", 1, 1_000_000_000)
# A query file holds questions and answers, not a corpus: larger is a mistake (or /dev/zero).
QUERY_FILE_BYTES = 64_000_000
# No option of the toolkit takes more text than this in one argument (a path is at most 4,096 bytes on Linux).
MAX_ARGUMENT_CHARS = 10_000


def text_problem(value: str) -> str | None:
    """Why PostgreSQL cannot store ``value`` as text, or None. Bytes that are not UTF-8 reach Python as lone
    surrogates (the file-system decoding of arguments and file names); a NUL byte ends a C string."""
    for position, character in enumerate(value):
        if character == "\x00":
            return f"contains a NUL byte (character {position + 1}), which PostgreSQL text cannot hold"
        if "\ud800" <= character <= "\udfff":
            byte = ord(character) - 0xDC00 if "\udc80" <= character <= "\udcff" else None
            what = f"byte 0x{byte:02x}" if byte is not None else "an unpaired surrogate"
            return f"is not valid UTF-8 ({what} at character {position + 1})"
    return None


def check_text(value: str, what: str) -> str:
    """Refuses text that cannot be stored (not UTF-8, NUL bytes) with one sentence naming ``what``."""
    problem = text_problem(value) if isinstance(value, str) else "is not text"
    if problem:
        raise InputError(f"{what[0].upper()}{what[1:]} {shown(value)} {problem}; pass it as UTF-8 text.")
    return value


def key_value(pair: str, keys=None) -> tuple[str, str] | None:
    """A ``KEY=VALUE`` string split at its first ``=``, the key stripped and the value as given; None when there is
    no ``=`` or the key is not one of ``keys`` (any identifier when ``keys`` is None). Each caller (chunker specs,
    retrieval options, search filters, model options) says in its own words what was wrong."""
    key, sep, value = pair.partition("=")
    key = key.strip()
    if not sep or not (key.isidentifier() if keys is None else key in keys):
        return None
    return key, value


def model_options(options) -> dict:
    """A model's provider options as a flat JSON object (``KEY=VALUE`` pairs of text, numbers or booleans), or
    ``InputError``. Checked in Python before SQL's secret rule (``toolkit.model_secrets``) sees them: a list has no
    keys to check, and a key nested in an object (``{"extra": {"api_key": ...}}``) would be stored unseen."""
    if options is None:
        return {}
    if not isinstance(options, dict):
        kind = "a list" if isinstance(options, list | tuple) else f"{type(options).__name__}"
        raise InputError(
            f'Model options must be a JSON object of KEY: VALUE pairs (e.g. {{"timeout": 30}}), not {kind}.'
        )
    for key, value in options.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise InputError(f"The model option name {shown(key)} is not a name; use letters, digits and _.")
        if isinstance(value, dict | list | tuple):
            raise InputError(
                f"The model option {key} holds a nested {'object' if isinstance(value, dict) else 'list'}; options "
                "are flat KEY=VALUE pairs of text, numbers or booleans."
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise InputError(f"The model option {key} must be a finite number, not {value!r}.")
        if value is not None and not isinstance(value, str | int | float | bool):
            raise InputError(f"The model option {key} must be text, a number or a boolean, not {shown(value)}.")
        if isinstance(value, str):
            check_text(value, f"the model option {key}")
    return dict(options)


# float32's smallest normal number: a vector whose squared length is below it (1e-45 in every coordinate) has no
# direction in single precision, where pgvector computes cosine distances: they come out NaN.
_FLOAT32_TINY = 1.1754944e-38


def vector_problem(array) -> tuple[int, str] | None:
    """(row, why) for the first row of a float32 (n, d) array that cannot be stored or searched as a direction:
    NaN or infinite values, all zeros, or a squared length that is subnormal or overflows in single precision;
    None when every row is fine."""
    import numpy as np

    finite = np.isfinite(array)
    if not finite.all():
        return int(np.argwhere(~finite)[0][0]), "has NaN or infinite values"
    zero = ~array.any(axis=1)
    if zero.any():
        return int(np.argmax(zero)), "is all zeros (it has no direction: its cosine distance to anything is NaN)"
    with np.errstate(over="ignore", under="ignore"):
        squared = np.einsum("ij,ij->i", array, array, dtype=np.float32)
    bad = ~(np.isfinite(squared) & (squared >= _FLOAT32_TINY))
    if bad.any():
        row = int(np.argmax(bad))
        size = "too large" if not np.isfinite(squared[row]) else "too small"
        return row, (
            f"is {size} to have a direction in single precision (its squared length is {float(squared[row]):.3g}; "
            "cosine distances to it come out NaN)"
        )
    return None


def has_booleans(vectors) -> bool:
    """True when ``vectors`` (an array, or nested lists) holds booleans: ``[true, false, ...]`` is not an embedding,
    though numpy would read it as ones and zeros."""
    import numpy as np

    if isinstance(vectors, np.ndarray):
        return vectors.dtype == np.bool_
    stack = [vectors]
    while stack:
        item = stack.pop()
        if isinstance(item, bool | np.bool_):
            return True
        if isinstance(item, list | tuple):
            if item and all(type(x) is float for x in item):
                continue  # the usual case: a row of floats, checked in one pass
            stack.extend(item)
        elif isinstance(item, np.ndarray) and item.dtype == np.bool_:
            return True
    return False


def query_vector(vector, dimensions: int | None = None):
    """A query vector given by a caller, as float32, or ``InputError`` with one sentence: it must be one vector of
    numbers (no booleans), of ``dimensions`` values when given, finite, not all zeros and not so small or large that
    its direction is lost in single precision (its scores would all be NaN)."""
    import numpy as np

    if has_booleans(vector):
        raise InputError("The query vector holds booleans; pass numbers (an embedding), not true/false values.")
    try:
        array = np.asarray(vector, dtype=np.float32)
    except (TypeError, ValueError):
        raise InputError("The query vector must be one vector of numbers.") from None
    if array.ndim != 1 or array.size == 0:
        raise InputError(f"The query vector must be one vector of numbers, not an array of shape {array.shape}.")
    if dimensions is not None and array.size != dimensions:
        raise InputError(
            f"The query vector has {array.size} dimensions; the version searched has {dimensions}. Embed the "
            "question with the version's model."
        )
    problem = vector_problem(array.reshape(1, -1))
    if problem is not None:
        raise InputError(f"The query vector {problem[1]}; nothing was searched. Pass the embedding of a question.")
    return array


def parse_options(pairs) -> dict:
    """``KEY=VALUE`` strings into provider options: true/false, integers and numbers are converted."""
    options = {}
    for pair in pairs:
        parsed = key_value(pair)
        if parsed is None:
            raise InputError(f"The option {pair!r} is not KEY=VALUE; write e.g. --option timeout=30.")
        key, value = parsed
        lowered = value.strip().lower()
        if lowered in ("true", "false"):
            options[key] = lowered == "true"
            continue
        for kind in (int, float):
            try:
                options[key] = kind(value)
                break
            except ValueError:
                continue
        else:
            options[key] = value
    return options


def parse_duration(text: str) -> timedelta:
    """'7d', '12h', '30m', '45s', '0' → a timedelta. A number needs its unit (only 0 goes without): a bare 30 read as
    seconds made ``--retention 30`` keep questions 30 seconds and ``retire --older-than 7`` retire every standby."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([dhms]?)\s*", text or "")
    if not match:
        raise InputError(f"{text!r} is not a duration; write e.g. 7d, 12h, 30m or 0.")
    value, unit = float(match.group(1)), match.group(2)
    if not unit and value != 0:
        number = match.group(1)
        raise InputError(
            f"{text!r} has no unit; say {number}d, {number}h, {number}m or {number}s (only 0 goes without one)."
        )
    unit = unit or "s"
    return timedelta(**{{"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}[unit]: value})


def iso_duration(value: timedelta | None) -> str | None:
    """A duration in ISO 8601 (``P30D``, ``PT12H``, ``P1DT0.5S``; ``PT0S`` for none), as JSON readers and
    Prometheus' tooling parse it; None stays None."""
    if value is None:
        return None
    sign = "-" if value < timedelta(0) else ""
    value = abs(value)
    days, seconds, micro = value.days, value.seconds, value.microseconds
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    time = ""
    if hours:
        time += f"{hours}H"
    if minutes:
        time += f"{minutes}M"
    if seconds or micro:
        time += (f"{seconds}.{micro:06d}".rstrip("0") if micro else str(seconds)) + "S"
    if not days and not time:
        return "PT0S"
    return f"{sign}P{f'{days}D' if days else ''}{'T' + time if time else ''}"


def check_tenant(tenant) -> str:
    """The one rule for a tenant's name, wherever one is given (ingest, search, serving, bindings): a string with
    something in it, at most 200 printable characters (SQL's own CHECK only refuses ''). Returns it unchanged."""
    if tenant is None or (isinstance(tenant, str) and not tenant.strip()):
        raise InputError("Give a tenant: pass --tenant (the tenant the documents were ingested for).")
    if not isinstance(tenant, str) or len(tenant) > 200 or not tenant.isprintable():
        raise InputError(
            f"The tenant {shown(tenant)} is not usable: give a non-empty name of at most 200 printable characters."
        )
    return tenant


# Keys ingest writes itself in documents.metadata (the folder a document was read from, a PDF's page offsets).
INGEST_METADATA_KEYS = ("root", "pages")


def document_metadata(metadata) -> dict:
    """Metadata given to ingest for its documents: top-level keys (non-empty printable text, not ``root`` or
    ``pages``, which ingest writes) with one string, finite number, boolean or null each, as the search filters
    ``metadata.KEY=VALUE`` compare them."""
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise InputError(f"Document metadata is a mapping of keys to values, not {shown(metadata)}.")
    for key, value in metadata.items():
        if not isinstance(key, str) or not key.strip() or not key.isprintable() or len(key) > 200:
            raise InputError(f"The metadata key {shown(key)} is not usable: give a non-empty printable name.")
        if key in INGEST_METADATA_KEYS:
            raise InputError(
                f"The metadata key {key!r} is ingest's own (the source folder, a PDF's pages); use another."
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise InputError(f"The metadata {key} is {value!r}; JSON has no NaN or infinity: give a finite number.")
        if value is not None and not isinstance(value, str | int | float | bool):
            raise InputError(
                f"The metadata {key} must be one string, number, true, false or null (filters compare one value), "
                f"not {shown(value)}."
            )
        if isinstance(value, str) and (problem := text_problem(value)):
            raise InputError(f"The metadata {key} holds text that cannot be stored ({problem}).")
    return dict(metadata)


# The deepest nesting of JSON the toolkit reads from a caller (a typed metadata value or filter, a search's filters,
# an HTTP body): what it stores and compares is a scalar in an object in an object, three levels. Python's parser
# and encoder recurse once per level and fail with a RecursionError near 1,000 levels, which a 10,000-character
# argument reaches; a bound far below that turns such input into a sentence before anything recurses.
MAX_JSON_DEPTH = 32


def json_text_depth(text: str, limit: int = MAX_JSON_DEPTH) -> int:
    """How deeply JSON ``text`` nests (objects and arrays, outside strings), counted without recursion; the count
    stops at ``limit + 1`` (enough to know it is too deep without reading a megabyte of brackets)."""
    depth = deepest = 0
    in_string = escaped = False
    for character in text:
        if in_string:
            if escaped:
                escaped = False
            elif character == "\\":
                escaped = True
            elif character == '"':
                in_string = False
        elif character == '"':
            in_string = True
        elif character in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    return deepest
        elif character in "]}":
            depth -= 1
    return deepest


def value_depth(value, limit: int = MAX_JSON_DEPTH) -> int:
    """How deeply a parsed JSON value (dicts, lists and tuples) nests, counted without recursion; stops at
    ``limit + 1``."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


def too_deep(what: str) -> InputError:
    return InputError(
        f"{what[0].upper()}{what[1:]} nests JSON more than {MAX_JSON_DEPTH} levels deep, the most the toolkit "
        "reads; nothing was read. Write it flatter (a compared value is one string, number, true, false or null)."
    )


def load_json(text: str, what: str, **options):
    """``json.loads(text)`` for text a caller wrote, nested at most MAX_JSON_DEPTH levels (``too_deep`` beyond,
    before the parser recurses); ``ValueError`` for text that is not JSON, as json.loads raises it."""
    import json

    # Only an object or an array nests (a scalar, or text that is not JSON, never makes the parser recurse).
    if text.lstrip()[:1] in ("[", "{") and json_text_depth(text) > MAX_JSON_DEPTH:
        raise too_deep(what)
    try:
        return json.loads(text, **options)
    except RecursionError:  # not reachable under the bound; a sentence all the same
        raise too_deep(what) from None


def metadata_value(key: str, text: str, what: str = "metadata filter"):
    """The value of a typed ``KEY=VALUE`` of document metadata (``--filter metadata.KEY=VALUE``, ``ingest
    --metadata``): JSON text (``2024``, ``true``, ``null``, ``"2024"``), or the text itself as a string when it is not
    JSON (``en``). An object or a list is refused: a filter compares one value; so is JSON nested deeper than
    MAX_JSON_DEPTH, and an empty VALUE (``""`` is the empty string)."""
    if not text.strip():
        raise InputError(
            f'The {what} {key} has no value; write one after the = (e.g. en or 2024), or "" (typed \'""\' in a '
            "shell) for the empty string."
        )
    try:
        # NaN and Infinity are not JSON: as typed, they are strings.
        value = load_json(text, f"the {what} {key}", parse_constant=lambda constant: constant)
    except ValueError:
        if text.strip()[:1] in ("{", "[", '"'):
            raise InputError(
                f"The {what} {key} has a value that starts like JSON but is not JSON ({shown(text)}); write a "
                "string, a number, true, false or null, e.g. lang=en or year=2024."
            ) from None
        return text
    if isinstance(value, dict | list):
        raise InputError(
            f"The {what} {key} compares a top-level key with one value, not with a JSON "
            f"{'object' if isinstance(value, dict) else 'list'}; give one string, number, true, false or null."
        )
    return value


def parse_metadata(pairs) -> dict:
    """``KEY=VALUE`` pairs typed for ``ingest --metadata`` (values read by ``metadata_value``), checked as
    ``document_metadata`` checks them."""
    metadata = {}
    for pair in pairs or ():
        key, sep, text = str(pair).partition("=")
        if not sep or not key.strip():
            raise InputError(f"--metadata takes KEY=VALUE (e.g. lang=en or year=2024), not {shown(pair)}.")
        value = metadata_value(key, text, "metadata")
        if key in metadata and metadata[key] != value:
            raise InputError(f"The metadata key {key} is given twice ({shown(metadata[key])}, {shown(value)}).")
        metadata[key] = value
    return document_metadata(metadata)
