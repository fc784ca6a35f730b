//! The atime policy (`Config::atime`, `Fs::set_atime`): relatime, noatime,
//! strictatime for reads served by the daemon.

use super::*;

/// A file whose atime is set to `atime` (seconds); returns its inode.
fn file_with_atime(fs: &Fs, name: &str, atime: i64) -> u64 {
    let ino = write_file(fs, ROOT, name, b"content");
    let t = SetTime::At(atime, 0);
    fs.setattr(&C, ino, &SetAttr { atime: Some(t), mtime: Some(SetTime::At(1_000_000_000, 0)), ..Default::default() })
        .unwrap();
    ino
}

fn atime_after_read(fs: &Fs, ino: u64) -> i64 {
    assert_eq!(read_all(fs, ino), b"content");
    fs.getattr(ino, None).unwrap().atime
}

#[test]
fn atime_policies() {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    let (old, future) = (1_100_000_000, now + 3600);
    let fs = mem();
    assert_eq!(fs.atime(), Atime::Relatime, "relatime by default");
    // relatime: an old atime moves, a recent one (after mtime and ctime) stays.
    let a = file_with_atime(&fs, "rel-old", old);
    assert!(atime_after_read(&fs, a) >= now);
    let b = file_with_atime(&fs, "rel-new", future);
    assert_eq!(atime_after_read(&fs, b), future);
    // strictatime: every read moves it.
    fs.set_atime(Atime::Strictatime);
    let c = file_with_atime(&fs, "strict", future);
    let t = atime_after_read(&fs, c);
    assert!(t >= now && t < future, "strictatime moves atime on every read: {t}");
    // noatime: never.
    fs.set_atime(Atime::Noatime);
    let d = file_with_atime(&fs, "no", old);
    assert_eq!(atime_after_read(&fs, d), old);
    fs.shutdown().unwrap();
    // The setting at open.
    let fs = Fs::open_store(Config { atime: Atime::Noatime, ..cfg(StoreLocation::Memory) }).unwrap();
    assert_eq!(fs.atime(), Atime::Noatime);
    let e = file_with_atime(&fs, "cfg", old);
    assert_eq!(atime_after_read(&fs, e), old);
    fs.shutdown().unwrap();
}
