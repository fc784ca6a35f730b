//! Whether a store's pack directory and pack files can be used at all
//! ([`packs_trouble`]): the check mount (before serving), fsck (as damage)
//! and `gc --store` make first, so that a `STORE/packs` replaced by a file,
//! made unreadable, or a pack file that became a directory is one line
//! naming the path, what is wrong and the fix, not a bare "I/O error".
//!
//! Owns: the wording of those lines. Must not touch: anything on disk
//! (it only stats, lists and opens for reading).

use std::fs::File;
use std::io::ErrorKind;
use std::path::Path;

use super::pack_id;

/// What a path that is not what it should be is instead ("a regular file").
fn kind_of(p: &Path) -> &'static str {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.file_type().is_symlink() => "a symbolic link",
        Ok(m) if m.is_dir() => "a directory",
        Ok(m) if m.is_file() => "a regular file",
        Ok(_) => "a special file",
        Err(_) => "unreadable",
    }
}

/// The fix for a path that cannot be read: permissions, or the disk.
fn unreadable(p: &Path, e: &std::io::Error, salvage: &str) -> String {
    let d = p.display();
    match e.kind() {
        ErrorKind::PermissionDenied => {
            format!("{d} cannot be read ({e}): fix its permissions (e.g. `chmod u+rwX {d}`, or run as the store's owner)")
        }
        _ => format!("{d} cannot be read ({e}): the disk may be failing; copy the store elsewhere and rebuild it with {salvage}"),
    }
}

/// Why `STORE/packs` (pack format v1, docs/FORMATS.md) or a pack file in it
/// (`NNNNNNNN.pack`) cannot be used, as one line naming the path, what is
/// wrong and the fix: `packs` not a directory (a regular file, a dangling
/// symbolic link…), a directory that cannot be listed, a pack file that is
/// not a regular file or cannot be opened for reading. `None` when `packs`
/// is missing (a new store, or one from before packs) or all is usable.
/// `store` is the store directory (named in the salvage command of the fix).
pub(crate) fn packs_trouble(store: &Path) -> Option<String> {
    let dir = store.join("packs");
    let d = dir.display();
    let salvage = format!("`ringfs salvage --store {} --to NEWDIR`", store.display());
    let aside = |p: &Path, what: &str| {
        format!(
            "{} is {what}, not {}: move it aside (`mv {} {}.bad`) and rebuild the workspace with {salvage} (the working copies hold the files' bytes)",
            p.display(),
            if p == dir { "a directory" } else { "a regular pack file" },
            p.display(),
            p.display()
        )
    };
    match std::fs::metadata(&dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Some(aside(&dir, kind_of(&dir))),
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return std::fs::symlink_metadata(&dir).is_ok().then(|| aside(&dir, "a symbolic link to nothing"));
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => return Some(aside(&dir, "a path through a non-directory")),
        Err(e) => return Some(unreadable(&dir, &e, &salvage)),
    }
    let rd = match std::fs::read_dir(&dir) {
        Ok(rd) => rd,
        Err(e) => return Some(unreadable(&dir, &e, &salvage)),
    };
    let mut names = Vec::new();
    for e in rd {
        match e {
            Ok(e) => names.push(e.file_name()),
            Err(e) => return Some(format!("{d} cannot be listed whole ({e}): {}", unreadable(&dir, &e, &salvage))),
        }
    }
    names.sort();
    for n in names {
        if n.to_str().and_then(pack_id).is_none() {
            continue;
        }
        let p = dir.join(&n);
        match std::fs::metadata(&p) {
            Ok(m) if m.is_file() => {}
            Ok(_) => return Some(aside(&p, kind_of(&p))),
            Err(e) if e.kind() == ErrorKind::NotFound => return Some(aside(&p, "a symbolic link to nothing")),
            Err(e) => return Some(unreadable(&p, &e, &salvage)),
        }
        if let Err(e) = File::open(&p) {
            return Some(unreadable(&p, &e, &salvage));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_trouble_names_the_path_and_the_fix() {
        let t = tempfile::tempdir().unwrap();
        assert_eq!(packs_trouble(t.path()), None, "no packs/ yet: fine");
        std::fs::write(t.path().join("packs"), b"x").unwrap();
        let m = packs_trouble(t.path()).unwrap();
        assert!(m.contains("packs is a regular file, not a directory") && m.contains("ringfs salvage --store"), "{m}");
        std::fs::remove_file(t.path().join("packs")).unwrap();
        std::fs::create_dir_all(t.path().join("packs").join("00000001.pack")).unwrap();
        let m = packs_trouble(t.path()).unwrap();
        assert!(m.contains("00000001.pack is a directory, not a regular pack file") && m.contains("mv "), "{m}");
        std::fs::remove_dir(t.path().join("packs").join("00000001.pack")).unwrap();
        std::fs::write(t.path().join("packs").join("00000001.pack"), b"").unwrap();
        assert_eq!(packs_trouble(t.path()), None);
    }
}
