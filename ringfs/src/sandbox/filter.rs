//! The seccomp filter of a sandboxed command (compiled with seccompiler,
//! installed just before execve; docs/SECURITY.md "System calls refused").
//!
//! Every call below fails with EPERM without running, except `clone3`,
//! which fails with ENOSYS so that the C library falls back to `clone`,
//! whose flags a filter can read (clone3 passes them in memory):
//! - `ioctl` TIOCSTI and TIOCLINUX (pushing input into a terminal);
//! - keyctl, add_key, request_key; bpf; perf_event_open; userfaultfd;
//! - kexec_load, kexec_file_load, init_module, finit_module, delete_module;
//! - the mount family: mount, umount2, pivot_root, chroot, fsopen, fsconfig,
//!   fsmount, fspick, open_tree, move_mount, mount_setattr; setns;
//! - swapon, swapoff, reboot, acct, quotactl, syslog, vhangup;
//! - `unshare` and `clone` with CLONE_NEWUSER (unless `--allow-userns`);
//! - io_uring_setup, io_uring_enter, io_uring_register (unless
//!   `--allow-io-uring`).
//!
//! On x86_64 a call of another ABI (i386 through `int 0x80`) ends the
//! process (seccompiler's architecture check), and an x32 call (number
//! with bit 30 set) fails with EPERM.

use std::collections::BTreeMap;

use anyhow::{anyhow, Result};
use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};

/// The programs to install, in order (each is one seccomp filter).
#[derive(Debug, Default)]
pub(super) struct Filters {
    progs: Vec<BpfProgram>,
}

const TIOCSTI: u64 = 0x5412;
const TIOCLINUX: u64 = 0x541C;
const CLONE_NEWUSER: u64 = libc::CLONE_NEWUSER as u64;

/// The calls refused unconditionally (see the module doc).
const REFUSED: &[i64] = &[
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_open_tree,
    libc::SYS_move_mount,
    libc::SYS_mount_setattr,
    libc::SYS_setns,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_reboot,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_syslog,
    libc::SYS_vhangup,
];

fn arch() -> Result<TargetArch> {
    TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| anyhow!("--sandbox: no seccomp filter for {}: {e:?}", std::env::consts::ARCH))
}

fn cond(arg: u8, op: SeccompCmpOp, v: u64) -> Result<SeccompCondition> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, v).map_err(|e| anyhow!("seccomp condition: {e}"))
}

fn rule(c: Vec<SeccompCondition>) -> Result<SeccompRule> {
    SeccompRule::new(c).map_err(|e| anyhow!("seccomp rule: {e}"))
}

fn compile(rules: BTreeMap<i64, Vec<SeccompRule>>, errno: i32) -> Result<BpfProgram> {
    let f = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(errno as u32), arch()?)
        .map_err(|e| anyhow!("seccomp filter: {e}"))?;
    f.try_into().map_err(|e| anyhow!("seccomp filter: {e}"))
}

/// x32 system calls carry bit 30 in their number (`__X32_SYSCALL_BIT`)
/// under the x86_64 architecture value: refused, so that the rules by
/// number cannot be stepped around on a kernel built with x32.
fn x32_guard() -> BpfProgram {
    const LD_W_ABS: u16 = 0x20;
    const JGE_K: u16 = 0x35;
    const RET_K: u16 = 0x06;
    let s = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    vec![
        s(LD_W_ABS, 0, 0, 0), // seccomp_data.nr
        s(JGE_K, 0, 1, 0x4000_0000),
        s(RET_K, 0, 0, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
        s(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
    ]
}

/// Compiles the filters for one call (`allow_userns`, `allow_io_uring`:
/// the flags of the same names).
pub(super) fn build(allow_userns: bool, allow_io_uring: bool) -> Result<Filters> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = REFUSED.iter().map(|n| (*n, Vec::new())).collect();
    rules.insert(
        libc::SYS_ioctl,
        vec![
            rule(vec![cond(1, SeccompCmpOp::Eq, TIOCSTI)?])?,
            rule(vec![cond(1, SeccompCmpOp::Eq, TIOCLINUX)?])?,
        ],
    );
    if !allow_userns {
        let newuser = || cond(0, SeccompCmpOp::MaskedEq(CLONE_NEWUSER), CLONE_NEWUSER);
        rules.insert(libc::SYS_unshare, vec![rule(vec![newuser()?])?]);
        rules.insert(libc::SYS_clone, vec![rule(vec![newuser()?])?]);
    }
    if !allow_io_uring {
        for n in [libc::SYS_io_uring_setup, libc::SYS_io_uring_enter, libc::SYS_io_uring_register] {
            rules.insert(n, Vec::new());
        }
    }
    let mut progs = vec![compile(rules, libc::EPERM)?];
    if !allow_userns {
        progs.push(compile(BTreeMap::from([(libc::SYS_clone3, Vec::new())]), libc::ENOSYS)?);
    }
    if cfg!(target_arch = "x86_64") {
        progs.push(x32_guard());
    }
    Ok(Filters { progs })
}

/// Installs the filters in the calling thread (no_new_privs must be set).
/// Allocates nothing: a forked child may call it. Returns 0 or an errno.
pub(super) fn install(f: &Filters) -> i32 {
    for p in &f.progs {
        match seccompiler::apply_filter(p) {
            Ok(()) => {}
            Err(seccompiler::Error::Seccomp(e) | seccompiler::Error::Prctl(e)) => {
                return e.raw_os_error().unwrap_or(libc::EINVAL)
            }
            Err(_) => return libc::EINVAL,
        }
    }
    0
}
