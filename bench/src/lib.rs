//! The fs-bench reproduction harness (issue 6; not yet implemented).
