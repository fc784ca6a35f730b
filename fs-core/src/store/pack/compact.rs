//! Compaction of pack files: moving the live chunks of mostly dead sealed packs into the open pack (see docs/FORMATS.md).
