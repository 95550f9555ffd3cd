#!/usr/bin/env python3
"""Builds the estimator's fitting corpus from text files on this machine (never from the sample
conversations): C headers, licences, docs, man pages, Python, JSON, logs, package lists and
multilingual tutorials. Chunks of 64..8192 bytes cut at UTF-8 boundaries; each file goes
wholly to the fit set or the held-out set (by a hash of its path).

usage: corpus.py OUT_DIR   -> OUT_DIR/{fit,holdout}.chunks (u32 length + bytes, repeated)
                              and OUT_DIR/{fit,holdout}.kinds (one kind per chunk)
"""
import glob, gzip, hashlib, os, random, struct, sys

out = sys.argv[1]
rng = random.Random(7)
SOURCES = [
    ("c", ["/usr/include/*.h", "/usr/include/*/*.h", "/usr/include/*/*/*.h"], 400),
    ("prose", ["/usr/share/common-licenses/*", "/usr/share/doc/*/copyright",
               "/usr/share/doc/*/README*", "/usr/share/doc/*/NEWS*"], 400),
    ("man", ["/usr/share/man/man1/*.gz", "/usr/share/man/man3/*.gz", "/usr/share/man/man5/*.gz"], 300),
    ("python", ["/usr/lib/python3/dist-packages/*/*.py", "/usr/lib/python3.*/*.py"], 300),
    ("json", ["/usr/share/**/*.json", "/root/.pyenv/versions/*/lib/python3*/test/**/*.json",
              "/usr/lib/node_modules/**/package.json", "/root/.rustup/toolchains/*/etc/*.json"], 300),
    ("logs", ["/var/log/*.log", "/var/log/apt/*.log", "/var/log/postgresql/*.log"], 50),
    ("pkglist", ["/var/lib/dpkg/status", "/var/lib/apt/lists/*Packages"], 5),
    ("multilingual", ["/usr/share/vim/vim90/tutor/tutor.*", "/usr/share/gnupg/help.*.txt",
                      "/usr/share/vim/vim90/lang/menu_*.vim", "/usr/share/i18n/locales/*"], 400),
]

def read(path):
    try:
        if os.path.getsize(path) > 4 << 20:
            return None
        data = open(path, "rb").read()
        if path.endswith(".gz"):
            data = gzip.decompress(data)
        return data.decode("utf-8")
    except Exception:
        return None

def chunks(text):
    data = text.encode()
    i = 0
    while i < len(data):
        n = int(64 * (2 ** rng.uniform(0, 7)))  # 64 B .. 8 KiB, log-uniform
        j = min(len(data), i + n)
        while j < len(data) and (data[j] & 0xC0) == 0x80:
            j += 1
        yield data[i:j]
        i = j

# Command output of the kinds agents read (listings, package tables, search hits, history).
COMMANDS = [
    "dpkg -l", "ls -la /usr/share/doc", "ls -la /usr/include", "ls -lR /etc", "ps aux",
    "df -h", "mount", "ip addr", "uname -a", "dpkg -L coreutils", "apt-cache show libc6 bash",
    "grep -rn include /usr/include/sys", "grep -rn -i error /usr/include/linux",
    "find /usr/share/doc -name '*.gz'", "stat /usr/bin/* ", "id", "cat /proc/cpuinfo",
    "cat /proc/meminfo", "ls -la /usr/lib/x86_64-linux-gnu", "git -C /work/main log --stat -n 40",
    "env -i PATH=/usr/bin:/bin printenv", "lsof -n", "sha256sum /usr/bin/[a-c]*", "netstat -an",
    "du -a /usr/share/man/man1", "file /usr/bin/*", "getent passwd", "cat /etc/services",
]

def command_outputs():
    import subprocess
    for i, cmd in enumerate(COMMANDS):
        try:
            out = subprocess.run(cmd, shell=True, capture_output=True, timeout=20).stdout
            text = out[: 2 << 20].decode("utf-8", "replace")
        except Exception:
            continue
        if len(text) > 64:
            yield "cmd:" + cmd, text

sets = {"fit": [], "holdout": []}
for path, text in command_outputs():
    which = "holdout" if int(hashlib.sha1(path.encode()).hexdigest(), 16) % 4 == 0 else "fit"
    cs = list(chunks(text))
    rng.shuffle(cs)
    for c in cs[:60]:
        sets[which].append(("cmdout", c))
for kind, patterns, max_files in SOURCES:
    files = sorted({p for pat in patterns for p in glob.glob(pat, recursive=True) if os.path.isfile(p)})
    rng.shuffle(files)
    taken = 0
    for path in files:
        if taken >= max_files:
            break
        text = read(path)
        if not text or len(text) < 64:
            continue
        taken += 1
        which = "holdout" if int(hashlib.sha1(path.encode()).hexdigest(), 16) % 4 == 0 else "fit"
        cs = list(chunks(text))
        rng.shuffle(cs)
        for c in cs[:40]:
            sets[which].append((kind, c))

os.makedirs(out, exist_ok=True)
for name, items in sets.items():
    with open(os.path.join(out, name + ".chunks"), "wb") as f, \
         open(os.path.join(out, name + ".kinds"), "w") as k:
        for kind, c in items:
            f.write(struct.pack("<I", len(c)))
            f.write(c)
            k.write(kind + "\n")
    print(name, len(items), "chunks", sum(len(c) for _, c in items), "bytes")
