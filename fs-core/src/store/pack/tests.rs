//! Unit and property tests of pack files: append, seal, read back, scan of
//! a torn tail, what open deletes and truncates.

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;

use proptest::prelude::*;

use super::*;

fn bytes(seed: u64, n: usize) -> Vec<u8> {
    (0..n).map(|i| ((i as u64).wrapping_mul(2654435761).wrapping_add(seed.wrapping_mul(97)) >> 7) as u8).collect()
}

fn hash(b: &[u8]) -> [u8; 32] {
    *blake3::hash(b).as_bytes()
}

fn fresh(dir: &Path) -> Packs {
    Packs::open(dir.join("packs"), None, &BTreeMap::new(), 0).unwrap()
}

/// Every record of every pack file, by pack id, as scan_pack sees them.
fn scan_all(p: &Packs) -> BTreeMap<u32, Vec<(u64, [u8; 32], usize)>> {
    let mut out = BTreeMap::new();
    for id in pack_files(p.dir()).unwrap() {
        let mut recs = Vec::new();
        let valid = scan_pack(&p.path(id), |o, h, b| recs.push((o, *h, b.len()))).unwrap();
        assert_eq!(valid, std::fs::metadata(p.path(id)).unwrap().len(), "pack {id} fully valid");
        out.insert(id, recs);
    }
    out
}

#[test]
fn append_seal_read_back() {
    let t = tempfile::tempdir().unwrap();
    let p = fresh(t.path());
    p.set_seal_at(1 << 20);
    let mut locs = Vec::new();
    for i in 0..60u64 {
        let b = bytes(i, 10_000 + (i as usize * 3001) % 90_000);
        let loc = p.append(&hash(&b), &b).unwrap();
        locs.push((loc, b));
    }
    p.sync().unwrap();
    let packs: BTreeSet<u32> = locs.iter().map(|(l, _)| l.pack).collect();
    assert!(packs.len() >= 3, "sealed at 1 MiB: {packs:?}");
    for id in &packs {
        assert!(std::fs::metadata(p.path(*id)).unwrap().len() <= 1 << 20);
    }
    let mut buf = Vec::new();
    for (loc, b) in &locs {
        p.read(*loc, &mut buf).unwrap();
        assert_eq!(&buf, b);
        assert_eq!(read_chunk(p.dir(), *loc).unwrap(), *b);
    }
    let scanned = scan_all(&p);
    let want: usize = locs.len();
    assert_eq!(scanned.values().map(|v| v.len()).sum::<usize>(), want);
    for (loc, b) in &locs {
        assert!(scanned[&loc.pack].contains(&(loc.offset, hash(b), b.len())));
    }
    assert!(matches!(p.read(Loc { pack: 999, offset: 52, len: 1 }, &mut buf), Err(e) if e.kind() == std::io::ErrorKind::NotFound));
}

/// `read_many` (D70): records of several packs, some far apart (more than
/// SPAN_GAP), one larger than SPAN_MAX, every one handed over whole with its
/// index, in order; a subset read alone; an error names the span's first
/// record, and `each`'s error stops the reads.
#[test]
fn read_many_gives_each_record_in_few_reads() {
    let t = tempfile::tempdir().unwrap();
    let p = fresh(t.path());
    p.set_seal_at(3 << 19);
    let mut recs = Vec::new();
    for i in 0..400u64 {
        // Mostly small records; every 50th a 70 KiB one (a gap over
        // SPAN_GAP for its neighbours when skipped), one of 1.2 MiB.
        let n = if i == 123 { (SPAN_MAX + (200 << 10)) as usize } else if i % 50 == 7 { 70 << 10 } else { 40 + (i as usize * 37) % 3000 };
        let b = bytes(i, n);
        recs.push((p.append(&hash(&b), &b).unwrap(), b));
    }
    p.sync().unwrap();
    assert!(recs.iter().map(|(l, _)| l.pack).collect::<BTreeSet<_>>().len() >= 2);
    let check = |pick: &dyn Fn(usize) -> bool| {
        let chosen: Vec<usize> = (0..recs.len()).filter(|i| pick(*i)).collect();
        let mut locs: Vec<Loc> = chosen.iter().map(|i| recs[*i].0).collect();
        locs.sort_by_key(|l| (l.pack, l.offset));
        let mut seen = Vec::new();
        p.read_many(&locs, |k, b| {
            let i = recs.iter().position(|(l, _)| *l == locs[k]).unwrap();
            assert_eq!(b, &recs[i].1[..], "record {i}");
            seen.push(k);
            Ok::<(), ()>(())
        })
        .unwrap();
        assert_eq!(seen, (0..locs.len()).collect::<Vec<_>>());
    };
    check(&|_| true);
    check(&|i| i % 50 != 7);
    check(&|i| i % 3 == 0);
    check(&|i| i == 123);
    check(&|_| false);
    // A record past its pack's end: the span's first record is named.
    let last = recs.iter().map(|(l, _)| *l).max_by_key(|l| (l.pack, l.offset)).unwrap();
    let bad = [Loc { pack: last.pack, offset: last.offset, len: last.len + 10 }];
    assert!(matches!(p.read_many(&bad, |_, _| Ok::<(), ()>(())), Err((0, Ok(e))) if e.kind() == std::io::ErrorKind::UnexpectedEof));
    // `each`'s error stops it.
    let locs: Vec<Loc> = recs.iter().take(5).map(|(l, _)| *l).collect();
    let mut calls = 0;
    assert!(matches!(p.read_many(&locs, |_, _| { calls += 1; Err("stop") }), Err((usize::MAX, Err("stop")))));
    assert_eq!(calls, 1);
}

#[test]
fn open_truncates_the_open_packs_torn_tail_only() {
    let t = tempfile::tempdir().unwrap();
    let p = fresh(t.path());
    p.set_seal_at(200_000);
    let mut locs = Vec::new();
    for i in 0..6u64 {
        let b = bytes(i, 60_000);
        locs.push((p.append(&hash(&b), &b).unwrap(), b));
    }
    p.sync().unwrap();
    let open = p.open_id().unwrap();
    let sealed = locs[0].0.pack;
    assert_ne!(open, sealed);
    drop(p);
    // A torn record at the end of both packs.
    let torn = |id: u32| {
        let f = OpenOptions::new().write(true).open(t.path().join("packs").join(pack_name(id))).unwrap();
        let end = f.metadata().unwrap().len();
        f.write_all_at(&[7u8; 50], end).unwrap();
        end
    };
    let sealed_len = torn(sealed) + 50;
    let open_len = torn(open);
    // And a pack file no index entry uses.
    std::fs::write(t.path().join("packs").join(pack_name(77)), b"RFSPACK1junk").unwrap();
    let mut known = BTreeMap::new();
    for (id, s) in [(sealed, true), (open, false)] {
        known.insert(id, PackInfo { total: HEADER_LEN, live: 0, sealed: s });
    }
    let p = Packs::open(t.path().join("packs"), None, &known, 0).unwrap();
    assert_eq!(std::fs::metadata(p.path(open)).unwrap().len(), open_len, "open pack truncated");
    assert_eq!(std::fs::metadata(p.path(sealed)).unwrap().len(), sealed_len, "sealed pack never truncated");
    assert!(!p.path(77).exists(), "unreferenced pack removed");
    assert_eq!(p.open_id(), Some(open));
    let b = bytes(99, 1000);
    let loc = p.append(&hash(&b), &b).unwrap();
    assert_eq!((loc.pack, loc.offset), (open, open_len + RECORD_HEADER), "appends continue after the last valid record");
    let mut buf = Vec::new();
    for (l, b) in locs.iter().chain([(loc, b.clone())].iter()) {
        p.read(*l, &mut buf).unwrap();
        assert_eq!(&buf, b);
    }
}

#[test]
fn open_never_cuts_what_the_index_committed() {
    // A damaged record in the middle of the open pack is damage, not a torn
    // tail: the records after it are committed and stay.
    let t = tempfile::tempdir().unwrap();
    let p = fresh(t.path());
    let mut locs = Vec::new();
    for i in 0..5u64 {
        let b = bytes(i, 40_000);
        locs.push((p.append(&hash(&b), &b).unwrap(), b));
    }
    p.sync().unwrap();
    let open = p.open_id().unwrap();
    drop(p);
    let path = t.path().join("packs").join(pack_name(open));
    let len = std::fs::metadata(&path).unwrap().len();
    OpenOptions::new().write(true).open(&path).unwrap().write_all_at(&[0x55u8; 100], locs[1].0.offset + 10).unwrap();
    let mut known = BTreeMap::new();
    known.insert(open, PackInfo { total: len, live: len - HEADER_LEN, sealed: false });
    let p = Packs::open(t.path().join("packs"), None, &known, 0).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), len, "committed bytes were cut");
    let mut buf = Vec::new();
    for (l, b) in &locs[2..] {
        p.read(*l, &mut buf).unwrap();
        assert_eq!(&buf, b, "a record after the damage");
    }
    let b = bytes(99, 1000);
    let loc = p.append(&hash(&b), &b).unwrap();
    assert_eq!(loc.offset, len + RECORD_HEADER, "appends go after the committed bytes");
}

#[test]
fn scan_refuses_other_files() {
    let t = tempfile::tempdir().unwrap();
    let f = t.path().join("x.pack");
    std::fs::write(&f, b"not a pack at all").unwrap();
    assert_eq!(scan_pack(&f, |_, _, _| {}).unwrap_err().kind(), std::io::ErrorKind::InvalidData);
    assert_eq!(pack_id("0000001f.pack"), Some(31));
    assert_eq!(pack_id("1f.pack"), None);
    assert_eq!(pack_name(31), "0000001f.pack");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// A pack cut at any byte scans as exactly the records wholly before
    /// the cut; a flipped byte ends the scan at the record holding it.
    #[test]
    fn scan_stops_at_a_torn_or_damaged_record(sizes in prop::collection::vec(0usize..5000, 1..12), cut in any::<prop::sample::Index>(), flip in any::<bool>()) {
        let t = tempfile::tempdir().unwrap();
        let p = fresh(t.path());
        let mut locs = Vec::new();
        for (i, n) in sizes.iter().enumerate() {
            let b = bytes(i as u64, *n);
            locs.push(p.append(&hash(&b), &b).unwrap());
        }
        p.sync().unwrap();
        let path = p.path(locs[0].pack);
        let len = std::fs::metadata(&path).unwrap().len();
        let at = HEADER_LEN + cut.index((len - HEADER_LEN) as usize) as u64;
        let f = OpenOptions::new().read(true).write(true).open(&path).unwrap();
        if flip {
            let mut b = [0u8; 1];
            f.read_exact_at(&mut b, at).unwrap();
            f.write_all_at(&[b[0] ^ 0x40], at).unwrap();
        } else {
            f.set_len(at).unwrap();
        }
        let mut seen = Vec::new();
        let valid = scan_pack(&path, |o, _, b| seen.push((o, b.len()))).unwrap();
        // Cut: the records wholly before `at`. Flip: the records before
        // the one holding byte `at` (those ending at or before it).
        let whole: Vec<(u64, usize)> = locs.iter().take_while(|l| l.offset + l.len as u64 <= at).map(|l| (l.offset, l.len as usize)).collect();
        prop_assert_eq!(&seen, &whole);
        let end = seen.last().map(|(o, n)| o + *n as u64).unwrap_or(HEADER_LEN);
        prop_assert_eq!(valid, end);
    }
}

#[test]
fn open_scans_only_past_the_durable_length() {
    // Packs::open reads and hashes only the bytes past what the index
    // recorded (D61): a record damaged before that is not looked at, a
    // valid record after it is kept, a torn record after that is cut.
    let t = tempfile::tempdir().unwrap();
    let p = fresh(t.path());
    let mut locs = Vec::new();
    for i in 0..4u64 {
        let b = bytes(i, 30_000);
        locs.push((p.append(&hash(&b), &b).unwrap(), b));
    }
    p.sync().unwrap();
    let open = p.open_id().unwrap();
    drop(p);
    let path = t.path().join("packs").join(pack_name(open));
    // The index knows the first three records; the fourth came later.
    let durable = locs[2].0.offset + locs[2].0.len as u64;
    let len = std::fs::metadata(&path).unwrap().len();
    assert_eq!(len, locs[3].0.offset + locs[3].0.len as u64);
    let f = OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(&[0x55u8; 100], locs[0].0.offset + 10).unwrap();
    f.write_all_at(&[7u8; 50], len).unwrap();
    drop(f);
    let mut known = BTreeMap::new();
    known.insert(open, PackInfo { total: durable, live: durable - HEADER_LEN, sealed: false });
    let p = Packs::open(t.path().join("packs"), None, &known, 0).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), len, "the torn tail cut, the valid record past the index kept");
    let mut buf = Vec::new();
    for (l, b) in &locs[1..] {
        p.read(*l, &mut buf).unwrap();
        assert_eq!(&buf, b);
    }
    p.read(locs[0].0, &mut buf).unwrap();
    assert_ne!(hash(&buf), hash(&locs[0].1), "the damaged record kept as it is (its readers check its hash)");
    let b = bytes(99, 1000);
    assert_eq!(p.append(&hash(&b), &b).unwrap().offset, len + RECORD_HEADER, "appends go after the kept bytes");
    drop(p);
    // Clean: the file ends where the index says; nothing to scan or cut.
    let mut known = BTreeMap::new();
    let end = std::fs::metadata(&path).unwrap().len();
    known.insert(open, PackInfo { total: end, live: end - HEADER_LEN, sealed: false });
    let p = Packs::open(t.path().join("packs"), None, &known, 0).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), end);
    assert_eq!(p.open_id(), Some(open));
}
