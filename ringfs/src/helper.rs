//! `mount.fuse.ringfs`: the mount(8) helper (the ringfs binary under that
//! name, a link `ringfs install` makes in /sbin). mount(8) runs
//!
//! ```text
//! mount.fuse.ringfs SOURCE TARGET [-sfnv] [-o OPTIONS] [-t fuse.ringfs]
//! ```
//!
//! for `mount -t fuse.ringfs SOURCE TARGET -o …` and for fstab lines of type
//! `fuse.ringfs`. SOURCE is the store directory, or `memory`; OPTIONS are
//! those of `ringfs mount -o` (ro, noatime, ignore=…, …; see
//! [`crate::options`]). It becomes `ringfs mount TARGET --store SOURCE -o
//! OPTIONS --daemon`, which returns once the mount is ready; with `remount`
//! among the options, `ringfs mount TARGET -o OPTIONS`. umount(8) then
//! stops the daemon like any unmount.

use std::ffi::OsString;

use anyhow::{bail, Result};

/// The names under which the binary acts as the helper.
pub fn is_helper(argv0: &std::ffi::OsStr) -> bool {
    std::path::Path::new(argv0).file_name().is_some_and(|n| n == "mount.fuse.ringfs")
}

/// The `ringfs` command line (program name first) for the helper's
/// arguments (after its own name), or None for `-f` (fake: do nothing).
pub fn to_ringfs_argv(args: Vec<OsString>) -> Result<Option<Vec<OsString>>> {
    let mut positional: Vec<OsString> = Vec::new();
    let mut options: Vec<String> = Vec::new();
    let (mut fake, mut sloppy, mut verbose) = (false, false, false);
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let Some(s) = a.to_str().map(str::to_string) else {
            positional.push(a);
            continue;
        };
        if s == "-o" {
            match it.next().and_then(|v| v.into_string().ok()) {
                Some(v) => options.push(v),
                None => bail!("-o needs a value: mount.fuse.ringfs SOURCE TARGET -o OPTIONS"),
            }
        } else if let Some(v) = s.strip_prefix("-o").filter(|v| !v.is_empty()) {
            options.push(v.to_string());
        } else if s == "-t" {
            // The type (fuse.ringfs) is ours by construction.
            let _ = it.next();
        } else if s == "-N" || s.starts_with("--namespace") {
            bail!("mount.fuse.ringfs does not support -N (mounting in another mount namespace): run mount(8) inside that namespace");
        } else if s.starts_with('-') && s.len() > 1 && s[1..].chars().all(|c| "sfnvw".contains(c)) {
            fake |= s.contains('f');
            sloppy |= s.contains('s');
            verbose |= s.contains('v');
            // -n (no mtab) and -w (read-write) need nothing.
        } else if s.starts_with('-') && s.len() > 1 {
            bail!("mount.fuse.ringfs: unknown flag {s}: usage: mount.fuse.ringfs SOURCE TARGET [-sfnv] [-o OPTIONS]");
        } else {
            positional.push(a);
        }
    }
    let [source, target] = <[OsString; 2]>::try_from(positional).map_err(|p| {
        anyhow::anyhow!(
            "mount.fuse.ringfs needs a SOURCE (the store directory, or `memory`) and a TARGET (the mountpoint), got {} arguments: mount -t fuse.ringfs STORE MOUNTPOINT",
            p.len()
        )
    })?;
    let opts: Vec<String> = options.iter().flat_map(|o| o.split(',')).map(str::trim).filter(|o| !o.is_empty()).map(str::to_string).collect();
    let opts = if sloppy { keep_known(opts) } else { opts };
    let remount = opts.iter().any(|o| o == "remount");
    let mut argv: Vec<OsString> = vec!["ringfs".into(), "mount".into(), target];
    if !remount {
        let source_str = source.to_str().unwrap_or("");
        match source_str {
            "memory" => argv.push("--memory".into()),
            // No store in the source: it must come from -o store=… or -o memory.
            "none" | "ringfs" | "" => {}
            _ => {
                argv.push("--store".into());
                argv.push(source);
            }
        }
        argv.push("--daemon".into());
    }
    if !opts.is_empty() {
        argv.push("-o".into());
        argv.push(opts.join(",").into());
    }
    if verbose {
        eprintln!("mount.fuse.ringfs: {}", argv.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" "));
    }
    Ok((!fake).then_some(argv))
}

/// With -s (sloppy): leave out the options `ringfs mount -o` would refuse.
fn keep_known(opts: Vec<String>) -> Vec<String> {
    opts.into_iter()
        .filter(|o| {
            let probe: Vec<OsString> = ["ringfs", "mount", "/", "-o", o.as_str()].iter().map(OsString::from).collect();
            let ok = crate::options::expand(probe).is_ok();
            if !ok {
                eprintln!("mount.fuse.ringfs: ignoring unknown option `{o}` (-s)");
            }
            ok
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(v: &[&str]) -> Result<Option<Vec<String>>> {
        Ok(to_ringfs_argv(v.iter().map(OsString::from).collect())?.map(|a| a.into_iter().map(|s| s.into_string().unwrap()).collect()))
    }

    #[test]
    fn maps_mount_8_arguments() {
        assert_eq!(
            run(&["/var/lib/ringfs/ws", "/work/ws", "-o", "rw,noatime,ignore=node_modules", "-t", "fuse.ringfs"]).unwrap().unwrap(),
            ["ringfs", "mount", "/work/ws", "--store", "/var/lib/ringfs/ws", "--daemon", "-o", "rw,noatime,ignore=node_modules"]
        );
        assert_eq!(run(&["memory", "/m", "-n"]).unwrap().unwrap(), ["ringfs", "mount", "/m", "--memory", "--daemon"]);
        assert_eq!(run(&["ringfs", "/m", "-o", "remount,ro"]).unwrap().unwrap(), ["ringfs", "mount", "/m", "-o", "remount,ro"]);
        assert_eq!(run(&["none", "/m", "-ostore=/s"]).unwrap().unwrap(), ["ringfs", "mount", "/m", "--daemon", "-o", "store=/s"]);
        assert!(run(&["/s", "/m", "-f"]).unwrap().is_none());
        assert_eq!(run(&["/s", "/m", "-s", "-o", "frob,noatime"]).unwrap().unwrap(), ["ringfs", "mount", "/m", "--store", "/s", "--daemon", "-o", "noatime"]);
        assert!(run(&["/m"]).unwrap_err().to_string().contains("SOURCE"));
        assert!(run(&["/s", "/m", "-N", "1"]).is_err());
    }
}
