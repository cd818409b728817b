"""Rolls back what the raftcut library (tests/powerloss/raftcut_shim.c)
journaled: after the process was SIGKILLed, the tracked files then hold
exactly what was durable (the model: that file's header, docs/testing.md).

    python3 raftcut.py rollback JOURNAL_DIR   # after a SIGKILL: a power cut
    python3 raftcut.py discard JOURNAL_DIR    # after a clean stop: all kept

`env(raft_dir, journal_dir, lib, mode)` gives the variables that make a
process journal its changes under `raft_dir`.
"""

import os
import struct
import sys

REC_PATH, REC_UNDO, REC_SYNC, REC_DURABLE, REC_UNLINK = 1, 2, 3, 4, 5
MAGIC = b"RCJ1"


def env(raft_dir, journal_dir, lib, mode="real"):
    """The environment for a process whose files under `raft_dir` are
    journaled into `journal_dir` (created)."""
    os.makedirs(journal_dir, exist_ok=True)
    preload = os.environ.get("LD_PRELOAD")
    return {"LD_PRELOAD": lib + (" " + preload if preload else ""),
            "ONCEGATE_RAFTCUT_DIR": os.path.abspath(raft_dir),
            "ONCEGATE_RAFTCUT_JOURNAL": os.path.abspath(journal_dir),
            "ONCEGATE_RAFTCUT_MODE": mode}


def journals(journal_dir):
    """The journal files, oldest process first."""
    if not os.path.isdir(journal_dir):
        return []
    return sorted(os.path.join(journal_dir, f) for f in os.listdir(journal_dir)
                  if f.startswith("journal-") and f.endswith(".rcj"))


def read_records(path):
    """The records of one journal; a record cut short at the end (the kill
    came during its write, before the change it announces) is dropped."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8 or data[:4] != MAGIC:
        raise ValueError("%s: not a raftcut journal" % path)
    out = []
    at = 8
    while at + 8 <= len(data):
        rtype, length = struct.unpack_from("<II", data, at)
        if at + 8 + length > len(data):
            break
        body = data[at + 8:at + 8 + length]
        at += 8 + length
        dev, ino = struct.unpack_from("<QQ", body, 0)
        rest = body[16:]
        if rtype == REC_PATH:
            out.append((rtype, (dev, ino), rest.decode()))
        elif rtype == REC_UNDO:
            old_size, n = struct.unpack_from("<QQ", rest, 0)
            p = 16
            pieces = []
            for _ in range(n):
                off, plen, zero = struct.unpack_from("<QQB", rest, p)
                p += 17
                if zero:
                    pieces.append((off, plen, None))
                else:
                    pieces.append((off, plen, rest[p:p + plen]))
                    p += plen
            out.append((rtype, (dev, ino), (old_size, pieces)))
        elif rtype == REC_DURABLE:
            out.append((rtype, (dev, ino), struct.unpack_from("<QQ", rest)))
        elif rtype in (REC_SYNC, REC_UNLINK):
            out.append((rtype, (dev, ino), None))
        else:
            raise ValueError("%s: unknown record type %d" % (path, rtype))
    return out


def _outside(start, end, protected):
    """The parts of [start, end) outside every range in `protected`."""
    parts = [(start, end)]
    for ps, pe in protected:
        nxt = []
        for s, e in parts:
            if pe <= s or ps >= e:
                nxt.append((s, e))
                continue
            if s < ps:
                nxt.append((s, ps))
            if pe < e:
                nxt.append((pe, e))
        parts = nxt
    return parts


def rollback(journal_dir, remove=True):
    """Undoes every journaled change that was not durable, newest first, and
    (by default) removes the journals. Returns counts: undone changes,
    bytes written back, files touched, changes kept as durable."""
    records = []
    for path in journals(journal_dir):
        records.extend(read_records(path))
    # Forward: which inode generation (an unlink ends one; inode numbers are
    # reused) each record belongs to, and the final name of each.
    gen = {}
    names = {}
    annotated = []
    for rtype, key, arg in records:
        g = gen.get(key, 0)
        if rtype == REC_PATH:
            names[(key, g)] = arg
        elif rtype == REC_UNLINK:
            names.pop((key, g), None)
            gen[key] = g + 1
        annotated.append((rtype, (key, g), arg))
    live = {kg: p for kg, p in names.items() if gen.get(kg[0], 0) == kg[1]}
    stats = {"undone": 0, "bytes": 0, "files": 0, "kept": 0}
    synced = set()
    protected = {}
    handles = {}
    try:
        for rtype, kg, arg in reversed(annotated):
            if kg not in live or kg in synced:
                if rtype == REC_UNDO and kg in live:
                    stats["kept"] += 1
                continue
            if rtype == REC_SYNC:
                synced.add(kg)
            elif rtype == REC_DURABLE:
                off, length = arg
                protected.setdefault(kg, []).append((off, off + length))
            elif rtype == REC_UNDO:
                old_size, pieces = arg
                f = handles.get(kg)
                if f is None:
                    path = live[kg]
                    st = os.stat(path)
                    if (st.st_dev, st.st_ino) != kg[0]:
                        raise RuntimeError(
                            "%s is not the journaled file (inode %d, not "
                            "%d): renamed behind the journal's back?"
                            % (path, st.st_ino, kg[0][1]))
                    f = handles[kg] = open(path, "r+b")
                prot = protected.get(kg, [])
                for off, plen, data in pieces:
                    for s, e in _outside(off, off + plen, prot):
                        f.seek(s)
                        if data is None:
                            f.write(b"\0" * (e - s))
                        else:
                            f.write(data[s - off:e - off])
                        stats["bytes"] += e - s
                keep = max([old_size] + [e for _, e in prot])
                f.flush()
                os.ftruncate(f.fileno(), keep)
                stats["undone"] += 1
    finally:
        for f in handles.values():
            f.close()
    stats["files"] = len(handles)
    if remove:
        discard(journal_dir)
    return stats


def discard(journal_dir):
    """Forgets the journals (a clean stop: everything was written out)."""
    for path in journals(journal_dir):
        os.remove(path)


def main(argv):
    if len(argv) != 3 or argv[1] not in ("rollback", "discard"):
        print("usage: raftcut.py rollback|discard JOURNAL_DIR",
              file=sys.stderr)
        return 2
    if argv[1] == "rollback":
        print(rollback(argv[2]))
    else:
        discard(argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
