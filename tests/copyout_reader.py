#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""copyout_reader.py -- an independent safetensors reader and writer for the tests
(standard library only: struct and json; no safetensors package, no xxhash).

  copyout_reader.py check FILE EXPECT.json STEP RANK WORLD
      FILE must be a pmckpt safetensors file of STEP: 8-byte little-endian header
      length, a JSON header naming every tensor of EXPECT.json (from
      `copyout_helper expect STEP`) with its dtype, shape and data_offsets, data
      packed without holes in layer order, each tensor's bytes equal to the
      deterministic contents (recomputed here, see tests/copyout_util.h), and
      __metadata__ with format, step, rank, world_size, layout_hash and an
      xxh3:<tensor> checksum per tensor equal to the expected one.
  copyout_reader.py marker FILE STEP WORLD
      FILE is a COMPLETE marker: JSON {"step": STEP, "world_size": WORLD,
      "layout_hash": "<16 hex digits>", "generation": N}.
  copyout_reader.py write FILE EXPECT.json STEP
      writes the contents of STEP as "another tool" would: tensors in another
      order, no pmckpt __metadata__ (only {"format": "pt"}), unpadded header.

Exit status 0 when every check passes; failures are printed as "# ..." lines.
"""
import json
import struct
import sys

DTYPE_SIZE = {"BOOL": 1, "U8": 1, "I8": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
              "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8,
              "F8_E4M3": 1, "F8_E5M2": 1}
M32 = 0xFFFFFFFF


def contents(step, index, nbytes):
    """tests/copyout_util.h gen_tensor(): 32-bit words, little-endian, truncated."""
    base = ((index + 1) * 16777619 + step * 2654435769) & M32
    nw = (nbytes + 3) // 4
    words = [((k * 2654435761) + base) & M32 for k in range(nw)]
    return struct.pack("<%dI" % nw, *words)[:nbytes]


errors = []


def expect(cond, msg):
    if not cond:
        errors.append(msg)
    return cond


def check(path, expect_path, step, rank, world):
    with open(expect_path) as f:
        exp = json.load(f)
    with open(path, "rb") as f:
        raw = f.read()
    if not expect(len(raw) >= 8, "file shorter than 8 bytes"):
        return
    (hlen,) = struct.unpack_from("<Q", raw, 0)
    if not expect(8 + hlen <= len(raw), "header length %d beyond the file" % hlen):
        return
    expect(hlen % 8 == 0, "header length %d not a multiple of 8 (data not 8-byte aligned)" % hlen)
    header = json.loads(raw[8:8 + hlen].decode("utf-8"))
    data = raw[8 + hlen:]
    expect(isinstance(header, dict), "header is not an object")
    meta = header.pop("__metadata__", None)
    if not expect(isinstance(meta, dict), "no __metadata__ object"):
        meta = {}
    names = {t["name"] for t in exp["tensors"]}
    expect(set(header) == names, "tensors %s, expected %s" % (sorted(header), sorted(names)))

    # offsets: contiguous from 0 to the end of the data, in layer order
    spans = sorted((v["data_offsets"][0], v["data_offsets"][1], k) for k, v in header.items())
    cursor = 0
    for b, e, k in spans:
        expect(b == cursor, "tensor %s starts at %d, expected %d" % (k, b, cursor))
        cursor = e
    expect(cursor == len(data), "tensors cover %d bytes of %d" % (cursor, len(data)))
    layer = {t["name"]: t["layer"] for t in exp["tensors"]}
    order = [layer[k] for _, _, k in spans if k in layer]
    expect(order == sorted(order), "data not in layer order: %s" % order)

    for t in exp["tensors"]:
        name = t["name"]
        h = header.get(name)
        if not expect(isinstance(h, dict), "tensor %s missing" % name):
            continue
        expect(h.get("dtype") == t["dtype"], "%s: dtype %s, expected %s" % (name, h.get("dtype"), t["dtype"]))
        expect(h.get("shape") == t["shape"], "%s: shape %s, expected %s" % (name, h.get("shape"), t["shape"]))
        b, e = h["data_offsets"]
        n = 1
        for d in h["shape"]:
            n *= d
        expect(e - b == n * DTYPE_SIZE.get(h["dtype"], 0) == t["nbytes"],
               "%s: data_offsets [%d, %d] for %d bytes" % (name, b, e, t["nbytes"]))
        expect(data[b:e] == contents(step, t["index"], t["nbytes"]),
               "%s: bytes differ from the contents of step %d" % (name, step))
        ck = meta.get("xxh3:" + name)
        expect(isinstance(ck, str) and len(ck) == 16 and int(ck, 16) == int(t["xxh3"], 16),
               "%s: checksum %r, expected %s" % (name, ck, t["xxh3"]))

    expect(all(isinstance(v, str) for v in meta.values()), "__metadata__ values must be strings")
    expect(meta.get("format") == "pmckpt", "format %r" % meta.get("format"))
    expect(meta.get("step") == str(step), "step %r, expected %d" % (meta.get("step"), step))
    expect(meta.get("rank") == str(rank), "rank %r, expected %d" % (meta.get("rank"), rank))
    expect(meta.get("world_size") == str(world),
           "world_size %r, expected %d" % (meta.get("world_size"), world))
    lh = meta.get("layout_hash", "")
    expect(len(lh) == 16 and all(c in "0123456789abcdef" for c in lh), "layout_hash %r" % lh)


def marker(path, step, world):
    with open(path) as f:
        m = json.load(f)
    expect(m.get("step") == step and m.get("world_size") == world and
           isinstance(m.get("generation"), int) and len(m.get("layout_hash", "")) == 16,
           "marker %r" % m)


def write(path, expect_path, step):
    with open(expect_path) as f:
        exp = json.load(f)
    header = {"__metadata__": {"format": "pt"}}
    blobs = []
    off = 0
    # another order than the store's: by name, descending
    for t in sorted(exp["tensors"], key=lambda t: t["name"], reverse=True):
        blob = contents(step, t["index"], t["nbytes"])
        header[t["name"]] = {"dtype": t["dtype"], "shape": t["shape"],
                             "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def main(argv):
    if len(argv) >= 2 and argv[1] == "check" and len(argv) == 7:
        check(argv[2], argv[3], int(argv[4]), int(argv[5]), int(argv[6]))
    elif len(argv) >= 2 and argv[1] == "marker" and len(argv) == 5:
        marker(argv[2], int(argv[3]), int(argv[4]))
    elif len(argv) >= 2 and argv[1] == "write" and len(argv) == 5:
        write(argv[2], argv[3], int(argv[4]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    for e in errors:
        print("# " + e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
