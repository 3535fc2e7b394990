-- Documents' raw text is stored out of line without compression: pglz took about 0.3 s of server CPU for
-- every 16 MB that ingest wrote (most of the documents' share of the write) and saved 19% of that text, a few
-- percent of a database whose chunk tables are most of its size. Substrings of uncompressed text (a chunk's
-- span) are also read without decompressing the whole document. Applies to rows written from now on.
SET LOCAL ROLE toolkit_owner;

ALTER TABLE toolkit.documents ALTER COLUMN raw_text SET STORAGE EXTERNAL;
