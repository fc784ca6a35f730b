//! fsck's checks of the snapshot tables ([`check_objects`]): every object's
//! id is the hash of its bytes and it decodes; every id a commit or
//! directory object names is stored (the commit graph and the trees are
//! whole, manifest nodes included); every ref names a commit; and the chunk
//! references file manifest objects and manifest nodes hold, added to what
//! fsck counts from live manifests.
//!
//! Owns: what a sound set of snapshot objects is. Must not touch: writing.

use std::collections::HashMap;
use std::path::Path;

use redb::{ReadTransaction, ReadableTable};

use crate::schema::{hex, OBJECTS, OBJECTS_V4, REFS};
use crate::store::pack::{pack_name, Loc, Packs};
use crate::snap::manifest::{child_nodes, own_chunks, KIND_NODE};
use crate::snap::object::*;

/// Checks the snapshot objects and the `refs` table of `rtx`, calling
/// `bad(place, what)` for each problem and adding one reference per chunk
/// entry of every file manifest object to `want_refs`. Returns the number
/// of objects. Schema 5: `object_index` and the records it points at in
/// the packs of `packs_dir` (a record that cannot be read is a problem),
/// and since schema 7 the entries of the object index files;
/// schema 4: the `objects` table. A store without the tables (schema < 4)
/// has none.
pub(crate) fn check_objects(rtx: &ReadTransaction, packs_dir: &Path, want_refs: &mut HashMap<[u8; 32], u64>, bad: &mut dyn FnMut(String, String)) -> Result<u64, redb::Error> {
    let mut kinds: HashMap<ObjectId, u8> = HashMap::new();
    let mut named: Vec<(ObjectId, ObjectId, u8)> = Vec::new();
    let mut n = 0;
    let mut one = |k: &[u8], b: &[u8], bad: &mut dyn FnMut(String, String)| {
        n += 1;
        let Ok(id) = <ObjectId>::try_from(k) else {
            bad("objects".into(), format!("a key of {} bytes (ids are 32)", k.len()));
            return;
        };
        let place = format!("object {}", hex_id(&id));
        if id_of(b) != id {
            bad(place.clone(), "its bytes do not hash to its id".into());
        }
        let kind = match kind_of(b) {
            Ok(k) => k,
            Err(e) => {
                bad(place, e);
                return;
            }
        };
        kinds.insert(id, kind);
        match kind {
            KIND_FILE | KIND_NODE => match (own_chunks(b), child_nodes(b)) {
                (Ok(own), Ok(kids)) => {
                    for h in own {
                        *want_refs.entry(h).or_default() += 1;
                    }
                    for c in kids {
                        named.push((id, c, KIND_NODE));
                    }
                }
                (Err(e), _) | (_, Err(e)) => bad(place, e),
            },
            KIND_DIR => match dec_dir(b) {
                Ok(d) => {
                    for e in d.entries {
                        if let Target::Object(c) = e.target {
                            named.push((id, c, if e.kind == EntryKind::Dir { KIND_DIR } else { KIND_FILE }));
                        }
                    }
                }
                Err(e) => bad(place, e),
            },
            KIND_COMMIT => match dec_commit(b) {
                Ok(c) => {
                    named.push((id, c.root, KIND_DIR));
                    for p in c.parents {
                        named.push((id, p, KIND_COMMIT));
                    }
                }
                Err(e) => bad(place, e),
            },
            k => bad(place, format!("unknown object kind {k}")),
        }
    };
    match rtx.open_table(OBJECTS) {
        Ok(t) => {
            let packs = Packs::read_only(packs_dir.to_path_buf());
            let mut buf = Vec::new();
            for r in t.iter()? {
                let (k, v) = r?;
                let (pack, offset, len) = v.value();
                match packs.read(Loc { pack, offset, len }, &mut buf) {
                    Ok(()) => one(k.value(), &buf, bad),
                    Err(e) => bad(format!("object_index/{}", hex(k.value())), format!("its record in {} at {offset} cannot be read: {e}", pack_name(pack))),
                }
            }
            // The object index files (D65) that pass their checks (the pack
            // check names a damaged one).
            let files = crate::store::oidx::check(rtx, packs_dir, &mut |_, _| {}).map_err(|e| redb::Error::Io(std::io::Error::other(e)))?;
            for f in &files {
                for (id, (pack, offset, len)) in f.iter() {
                    match packs.read(Loc { pack, offset, len }, &mut buf) {
                        Ok(()) => one(&id, &buf, bad),
                        Err(e) => bad(format!("packs/{}", crate::store::oidx::file_name(f.n)), format!("object {}: its record in {} at {offset} cannot be read: {e}", hex(&id), pack_name(pack))),
                    }
                }
            }
        }
        Err(redb::TableError::TableDoesNotExist(_)) => match rtx.open_table(OBJECTS_V4) {
            Ok(t) => {
                for r in t.iter()? {
                    let (k, v) = r?;
                    one(k.value(), v.value(), bad);
                }
            }
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(0),
            Err(e) => return Err(e.into()),
        },
        Err(e) => return Err(e.into()),
    }
    for (from, to, want) in named {
        match kinds.get(&to) {
            Some(k) if *k == want => {}
            Some(k) => bad(format!("object {}", hex_id(&from)), format!("names {} as kind {want}, but it is kind {k}", hex_id(&to))),
            None => bad(format!("object {}", hex_id(&from)), format!("names {}, which is missing", hex_id(&to))),
        }
    }
    if let Ok(refs) = rtx.open_table(REFS) {
        for r in refs.iter()? {
            let (k, v) = r?;
            if k.value() == "HEAD" {
                continue;
            }
            match <ObjectId>::try_from(v.value()) {
                Ok(id) if kinds.get(&id) == Some(&KIND_COMMIT) => {}
                _ => bad(format!("ref {}", k.value()), "does not name a stored commit".into()),
            }
        }
    }
    Ok(n)
}
