#!/usr/bin/env python3
"""Writes the fuzz harnesses' seed corpora (tests/fuzz/corpus/<harness>/) from the real files in
../shared/data: their headers, trimmed copies small enough to run many times a second, and a few
hand-made neighbours of each. The same output every time, but for the time stamps libhdf5 writes
into the small tensor file. Run it again when a format's reader learns something new.
    LATMIX_DATA_DIR=../shared/data python3 tests/fuzz/make-corpus.py [RUN_DIR_WITH_LATMIX_JSON [CAPTURE.h5 ...]]
The capture files (`latmix capture --out`, small ones: a few windows of stories260K, float32 and
--bf16) seed the activations harness."""
import json, os, struct, subprocess, sys, tempfile, zlib

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.environ.get("LATMIX_DATA_DIR", os.path.join(HERE, "..", "..", "..", "shared", "data"))
OUT = os.path.join(HERE, "corpus")


def put(harness, name, data):
    d = os.path.join(OUT, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def st_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))


def st_file(header, data_size):
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + bytes(range(256)) * (data_size // 256) + bytes(data_size % 256)


# safetensors: the real headers with their data section cut (offsets past the end), and small
# complete files of every dtype, empty tensors and metadata.
for model in ("brownpy-13M", "stories260K-hf"):
    h = st_header(os.path.join(DATA, "models", model, "model.safetensors"))
    text = json.dumps(h, separators=(",", ":")).encode()
    put("safetensors", model + "-header", struct.pack("<Q", len(text)) + text + bytes(64))
    # The same tensors, shrunk to 2 x 3 each so that the whole file is a few kilobytes.
    small, off = {"__metadata__": {"format": "pt"}}, 0
    for name in sorted(k for k in h if k != "__metadata__")[:24]:
        small[name] = {"dtype": h[name]["dtype"], "shape": [2, 3], "data_offsets": [off, off + 24]}
        off += 24
    put("safetensors", model + "-small", st_file(small, off))
sizes = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
         "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8}
every, off = {}, 0
for i, (dt, n) in enumerate(sizes.items()):
    every["t%d" % i] = {"dtype": dt, "shape": [3], "data_offsets": [off, off + 3 * n]}
    off += 3 * n
every["empty"] = {"dtype": "F32", "shape": [0, 4], "data_offsets": [off, off]}
every["scalar"] = {"dtype": "F32", "shape": [], "data_offsets": [off, off + 4]}
put("safetensors", "every-dtype", st_file(every, off + 4))

# model.safetensors.index.json: brownpy's tensors split over two shards, and a shard outside.
names = sorted(k for k in st_header(os.path.join(DATA, "models", "brownpy-13M", "model.safetensors")) if k != "__metadata__")
wm = {n: "model-%05d-of-00002.safetensors" % (1 + i * 2 // len(names)) for i, n in enumerate(names)}
put("shardindex", "brownpy-2-shards", json.dumps({"metadata": {"total_size": 51662224}, "weight_map": wm}, indent=2))
put("shardindex", "escaping-shard", json.dumps({"weight_map": {"a": "../x.safetensors", "b": "/abs", "c": ""}}))

# config.json: the real models' and the shipped real-shape configs.
for model in ("brownpy-13M", "stories260K-hf"):
    put("config", model, open(os.path.join(DATA, "models", model, "config.json"), "rb").read())
configs = os.path.join(HERE, "..", "..", "resources", "configs")
for name in sorted(os.listdir(configs)):
    if name.endswith(".json"):
        put("config", name[:-5], open(os.path.join(configs, name), "rb").read())

# llama2.c: stories260K's 28-byte header followed by the file size it must match (the harness's
# layout), the same with another size, a version-1 magic and a negative (untied) vocab size.
binp = os.path.join(DATA, "models", "stories260K", "stories260K.bin")
head = open(binp, "rb").read(28)
put("llama2c", "stories260K", head + struct.pack("<Q", os.path.getsize(binp)))
put("llama2c", "stories260K-truncated", head + struct.pack("<Q", os.path.getsize(binp) - 4))
put("llama2c", "ak42", struct.pack("<I", 0x616B3432) + struct.pack("<6i", 1, 0, 0, 0, 0, 0) + struct.pack("<Q", 256))
v = list(struct.unpack("<7i", head))
v[5] = -v[5]
put("llama2c", "untied", struct.pack("<7i", *v) + struct.pack("<Q", os.path.getsize(binp)))

# llama2.c tokenizer.bin: the first pieces of stories260K's (512 pieces) and of the Llama 2 one.
def first_pieces(path, count):
    raw = open(path, "rb").read()
    pos, out = 4, [raw[:4]]
    for _ in range(count):
        n = struct.unpack("<i", raw[pos + 4:pos + 8])[0]
        out.append(raw[pos:pos + 8 + n])
        pos += 8 + n
    return b"".join(out)

put("llama2c_tokenizer", "tok512-300", first_pieces(os.path.join(DATA, "models", "stories260K", "tok512.bin"), 300))
put("llama2c_tokenizer", "llama2-300", first_pieces(os.path.join(DATA, "models", "llama2-tokenizer-32k", "tokenizer.bin"), 300))

# tokenizer.json: the real Llama 3 file with its vocabulary cut to the first 1000 ids and the
# merges among them (everything else as shipped), and the added tokens renumbered after them.
# The harness reads text to encode from the first line.
j = json.load(open(os.path.join(DATA, "tokenizers", "llama3", "tokenizer.json"), encoding="utf-8"))
vocab = {t: i for t, i in j["model"]["vocab"].items() if i < 1000}
merges = []
for m in j["model"]["merges"]:
    a, b = m.split(" ") if isinstance(m, str) else m
    if a in vocab and b in vocab and a + b in vocab:
        merges.append(m)
j["model"]["vocab"], j["model"]["merges"] = vocab, merges
j["added_tokens"] = j["added_tokens"][:8]
for k, t in enumerate(j["added_tokens"]):
    t["id"] = 1000 + k
pp = json.dumps(j["post_processor"])
for k in range(8):
    pp = pp.replace(str(128000 + k), str(1000 + k))
j["post_processor"] = json.loads(pp)
text = json.dumps(j, ensure_ascii=False)
put("tokenizer_json", "llama3-1000", "Hello world, it's 2026: caf\u00e9 \U0001F600 <|begin_of_text|>x\n" + text)

# tokenizer.model: the Llama 2 SentencePiece model with its first 400 pieces (protobuf field 1 of
# ModelProto, repeated); trainer and normalizer specs as shipped.
def varint(buf, p):
    r = s = 0
    while True:
        b = buf[p]
        r |= (b & 0x7F) << s
        p += 1
        s += 7
        if b < 0x80:
            return r, p

model = open(os.path.join(DATA, "models", "llama2-tokenizer-32k", "tokenizer.model"), "rb").read()
p, kept, pieces = 0, [], 0
while p < len(model):
    start = p
    key, p = varint(model, p)
    field, wire = key >> 3, key & 7
    if wire == 2:
        n, p = varint(model, p)
        p += n
    elif wire == 0:
        _, p = varint(model, p)
    elif wire == 5:
        p += 4
    elif wire == 1:
        p += 8
    if field == 1:
        pieces += 1
        if pieces > 400:
            continue
    kept.append(model[start:p])
put("tokenizer_model", "llama2-400", b"".join(kept))

# latmix.json: a real run record when one is given, and hand-made neighbours.
if len(sys.argv) > 1:
    put("runsummary", "run", open(os.path.join(sys.argv[1], "latmix.json"), "rb").read())
    # HDF5 tensor files of the run (give a small one: stories260K, a few steps).
    for name in ("train.h5", "transforms.h5"):
        f = os.path.join(sys.argv[1], name)
        if os.path.getsize(f) <= 256 * 1024:
            put("tensorfile", name, open(f, "rb").read())

# Activation run files (io/ActivationStore), as `latmix capture` wrote them.
for f in sys.argv[2:]:
    if os.path.getsize(f) <= 256 * 1024:
        put("activations", os.path.basename(f), open(f, "rb").read())

# A small tensor file in io::writeTensorFile's layout (groups, float64/float32/int64 datasets,
# empty and 0-d ones, a string attribute on the root), written through libhdf5 by h5c++.
SMALL_H5 = r"""
#include <H5Cpp.h>
#include <cstdint>
int main(int, char** argv) {
    H5::FileAccPropList access; // io/TensorFile's format: HDF5 1.8, checksummed metadata
    access.setLibverBounds(H5F_LIBVER_V18, H5F_LIBVER_LATEST);
    H5::FileCreatPropList create; // the 512-byte user block that holds io/TensorFile's seal
    create.setUserblock(512);
    H5::H5File f(argv[1], H5F_ACC_TRUNC, create, access);
    f.createGroup("T1");
    f.createGroup("layers");
    f.createGroup("layers/0");
    const hsize_t d2[2] = {3, 2}, d1[1] = {4}, d0[2] = {0, 4};
    const double a[6] = {1, -2, 0.5, 3, 0, -0.25};
    f.createDataSet("T1/A", H5::PredType::NATIVE_DOUBLE, H5::DataSpace(2, d2)).write(a, H5::PredType::NATIVE_DOUBLE);
    const float v[4] = {1, 2, 3, 4};
    f.createDataSet("layers/0/v", H5::PredType::NATIVE_FLOAT, H5::DataSpace(1, d1)).write(v, H5::PredType::NATIVE_FLOAT);
    const std::int64_t step = 7;
    f.createDataSet("step", H5::PredType::NATIVE_INT64, H5::DataSpace(H5S_SCALAR)).write(&step, H5::PredType::NATIVE_INT64);
    f.createDataSet("layers/0/empty", H5::PredType::NATIVE_FLOAT, H5::DataSpace(2, d0));
    H5::StrType t(H5::PredType::C_S1, 9);
    f.openGroup("/").createAttribute("method", t, H5::DataSpace(H5S_SCALAR)).write(t, std::string("latmix-lu"));
}
"""
with tempfile.TemporaryDirectory() as tmp:
    src, exe, out = (os.path.join(tmp, n) for n in ("small.cpp", "small", "small.h5"))
    open(src, "w").write(SMALL_H5)
    subprocess.run(["h5c++", src, "-o", exe], check=True, cwd=tmp)  # h5c++ leaves its .o in the cwd
    subprocess.run([exe, out], check=True)
    body = open(out, "rb").read()[512:]
    seal = ("LATMiX tensor file 1\nbytes %d\ncrc32 %08x\n" % (512 + len(body), zlib.crc32(body))).encode()
    put("tensorfile", "small", seal + b" " * (512 - len(seal)) + body)
# A small activation run file in io::ActivationWriter's layout: a float32 point, a bfloat16 one
# (uint16 bits + "dtype" attribute), int32 tokens, string attributes on the root.
SMALL_ACTIVATIONS = r"""
#include <H5Cpp.h>
#include <cstdint>
int main(int, char** argv) {
    H5::FileAccPropList access;
    access.setLibverBounds(H5F_LIBVER_V18, H5F_LIBVER_LATEST);
    H5::FileCreatPropList create;
    create.setUserblock(512);
    H5::H5File f(argv[1], H5F_ACC_TRUNC, create, access);
    H5::Group g = f.createGroup("/activations");
    const hsize_t d[2] = {4, 3}, b[2] = {2, 2}, t[2] = {1, 4};
    const float v[12] = {1, -2, 0.5f, 3, 0, -0.25f, 7, 8, 9, -1, 2, 4};
    g.createDataSet("layers.0.mlp.down_proj.input", H5::PredType::NATIVE_FLOAT, H5::DataSpace(2, d)).write(v, H5::PredType::NATIVE_FLOAT);
    const std::uint16_t h[4] = {0x3f80, 0xbf80, 0x4000, 0x0000};
    H5::DataSet bf = g.createDataSet("layers.0.self_attn.qkv.input", H5::PredType::NATIVE_UINT16, H5::DataSpace(2, b));
    bf.write(h, H5::PredType::NATIVE_UINT16);
    H5::StrType s8(H5::PredType::C_S1, 8);
    bf.createAttribute("dtype", s8, H5::DataSpace(H5S_SCALAR)).write(s8, std::string("bfloat16"));
    const std::int32_t ids[4] = {1, 5, 9, 2};
    f.createDataSet("/tokens", H5::PredType::NATIVE_INT32, H5::DataSpace(2, t)).write(ids, H5::PredType::NATIVE_INT32);
    H5::StrType s4(H5::PredType::C_S1, 4);
    f.openGroup("/").createAttribute("model", s4, H5::DataSpace(H5S_SCALAR)).write(s4, std::string("demo"));
}
"""
with tempfile.TemporaryDirectory() as tmp:
    src, exe, out = (os.path.join(tmp, n) for n in ("acts.cpp", "acts", "acts.h5"))
    open(src, "w").write(SMALL_ACTIVATIONS)
    subprocess.run(["h5c++", src, "-o", exe], check=True, cwd=tmp)
    subprocess.run([exe, out], check=True)
    body = open(out, "rb").read()[512:]
    seal = ("LATMiX tensor file 1\nbytes %d\ncrc32 %08x\n" % (512 + len(body), zlib.crc32(body))).encode()
    put("activations", "small", seal + b" " * (512 - len(seal)) + body)
put("runsummary", "minimal", json.dumps({"method": "rtn", "format": {"format": "mxfp4", "block": 32},
                                         "results": {"wikitext2": {"fp": 12.5, "w4a4": 13.25}}}))
