//! Native roots: bind-mounting eligible local-only directories over the FUSE mount (issue 5; not yet implemented).
