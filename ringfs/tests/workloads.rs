//! Real tools in the mount, on `--memory` and `--store`: git, npm (a tiny package from
//! the registry), sqlite in WAL mode with two connections, python venv.

mod common;

use common::*;
use std::time::Duration;

fn git(m: &mut TestMount) {
    m.sh_ok(
        "git init -q -b main repo && cd repo\n\
         mkdir -p src/a/b && for i in $(seq 1 50); do echo \"line $i\" > src/a/b/f$i.txt; done\n\
         printf '#!/bin/sh\\necho hi\\n' > run.sh && chmod +x run.sh && ln -s run.sh link\n\
         git add -A && git commit -q -m initial\n\
         test -z \"$(git status --porcelain)\"\n\
         echo change >> src/a/b/f1.txt && git mv src/a/b/f2.txt src/moved.txt && git rm -q src/a/b/f3.txt\n\
         git status --porcelain | sort > ../status.txt\n\
         git commit -q -am second\n\
         test -z \"$(git status --porcelain)\"\n\
         git checkout -q -b topic && echo topic > topic.txt && git add topic.txt && git commit -q -m topic\n\
         git checkout -q main && git merge -q --no-edit topic\n\
         test \"$(git log --oneline | wc -l)\" = 3\n\
         git log --format=%s | tr '\\n' ' ' | grep -q 'topic second initial'\n\
         git gc -q && git fsck --no-progress --strict\n\
         test -x run.sh && test \"$(readlink link)\" = run.sh\n\
         git stash list >/dev/null && git diff HEAD~1 --stat >/dev/null",
    );
    let status = std::fs::read_to_string(m.p("status.txt")).unwrap();
    assert_eq!(status, " M src/a/b/f1.txt\nD  src/a/b/f3.txt\nR  src/a/b/f2.txt -> src/moved.txt\n");
    // Clone inside the mount (hard links for the object store on the same fs).
    m.sh_ok("git clone -q repo clone && cd clone && test \"$(git rev-parse HEAD)\" = \"$(git -C ../repo rev-parse HEAD)\" && git fsck --no-progress");
    if m.backend() == Backend::Store {
        m.remount();
        m.sh_ok("cd repo && test -z \"$(git status --porcelain)\" && git fsck --no-progress --strict && test \"$(git log --oneline | wc -l)\" = 3");
    }
}

fn npm(m: &mut TestMount) {
    let cache = m.host_tmp().join("npm-cache");
    let o = m.sh_timeout(
        &format!(
            "mkdir app && cd app && npm init -y >/dev/null\n\
             npm install --cache '{}' --no-audit --no-fund --no-update-notifier --loglevel=error is-number@7.0.0\n\
             test -f node_modules/is-number/package.json\n\
             node -e 'const n = require(\"is-number\"); if (!n(5) || n(\"x\")) process.exit(1); console.log(\"ok\")'\n\
             grep -q '\"is-number\"' package-lock.json",
            cache.display()
        ),
        Duration::from_secs(300),
    );
    let out = m.check_ok("npm install is-number@7.0.0", &o);
    assert!(out.contains("ok"), "{out}");
    // A second install from the lockfile (npm ci removes and re-creates node_modules).
    m.sh_ok(&format!("cd app && npm ci --cache '{}' --no-audit --no-fund --loglevel=error --offline && test -f node_modules/is-number/index.js", cache.display()));
    if m.backend() == Backend::Store {
        m.remount();
        m.sh_ok("cd app && node -e 'require(\"is-number\")'");
    }
}

fn sqlite_wal(m: &mut TestMount) {
    let out = m.sh_ok(
        r#"python3 - <<'PYEOF'
import sqlite3
a = sqlite3.connect('app.db', isolation_level=None)
assert a.execute('pragma journal_mode=wal').fetchone()[0] == 'wal'
a.execute('create table kv(k text primary key, v text)')
b = sqlite3.connect('app.db', isolation_level=None)
b.execute('pragma busy_timeout=5000')
for i in range(500):
    (a if i % 2 else b).execute('insert into kv values(?, ?)', (f'k{i}', 'v' * (i % 50)))
assert a.execute('select count(*) from kv').fetchone()[0] == 500
assert b.execute('select count(*) from kv').fetchone()[0] == 500
a.execute('begin'); a.execute('update kv set v = ? where k = ?', ('new', 'k1'))
assert b.execute('select v from kv where k = ?', ('k1',)).fetchone()[0] == 'v'
a.execute('commit')
assert b.execute('select v from kv where k = ?', ('k1',)).fetchone()[0] == 'new'
a.execute('pragma wal_checkpoint(full)')
print(a.execute('pragma integrity_check').fetchone()[0])
a.close(); b.close()
PYEOF
sqlite3 app.db 'pragma journal_mode' && sqlite3 app.db 'select count(*) from kv'"#,
    );
    assert_eq!(out, "ok\nwal\n500\n");
    // Two sqlite3 CLI processes at once in WAL mode.
    m.sh_ok(
        "(for i in $(seq 1 200); do echo \"insert into kv values('a$i', 'x');\"; done | sqlite3 -cmd '.timeout 10000' app.db) &\n\
         (for i in $(seq 1 200); do echo \"insert into kv values('b$i', 'y');\"; done | sqlite3 -cmd '.timeout 10000' app.db) &\n\
         wait\n\
         test \"$(sqlite3 app.db 'select count(*) from kv')\" = 900 && test \"$(sqlite3 app.db 'pragma integrity_check')\" = ok",
    );
    if m.backend() == Backend::Store {
        m.remount();
        let o = m.sh_ok("sqlite3 app.db 'select count(*) from kv; pragma integrity_check'");
        assert_eq!(o, "900\nok\n");
    }
}

fn venv(m: &mut TestMount) {
    m.sh_ok(
        "python3 -m venv .venv && .venv/bin/python -c 'import sys; assert sys.prefix != sys.base_prefix; print(sys.version)'\n\
         .venv/bin/python -m pip --version\n\
         mkdir -p pkg/mymod && echo 'X = 42' > pkg/mymod/__init__.py\n\
         cd pkg && ../.venv/bin/python -c 'import mymod; assert mymod.X == 42' && test -d mymod/__pycache__",
    );
    if m.backend() == Backend::Store {
        m.remount();
        m.sh_ok(".venv/bin/python -c 'import sys, json, sqlite3; print(sys.prefix)' | grep -q .venv");
    }
}

both_backends! {
    git => git_workflow_memory, git_workflow_store;
    npm => npm_install_tiny_package_memory, npm_install_tiny_package_store;
    sqlite_wal => sqlite_wal_two_connections_memory, sqlite_wal_two_connections_store;
    venv => python_venv_memory, python_venv_store;
}
