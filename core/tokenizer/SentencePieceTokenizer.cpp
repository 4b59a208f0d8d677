#include "tokenizer/SentencePieceTokenizer.h"

#include "tokenizer/SentencePieceBpeJson.h"

// Only for the size of the object the library constructs; nothing of the header is called
// directly (the library is not linked, see the header).
#include <sentencepiece_processor.h>

#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string_view>
#include <type_traits>
#include <memory>

namespace latmix::tokenizer {

namespace {

// sentencepiece::util::Status as the library returns it: one pointer (null when OK) and a
// non-trivial destructor, so that, like the real class, it is returned through a hidden pointer
// (Itanium C++ ABI). Destroyed by the library's own ~Status.
struct SpStatus {
    void* rep = nullptr;
    SpStatus() = default;
    SpStatus(const SpStatus&) = delete;
    SpStatus& operator=(const SpStatus&) = delete;
    ~SpStatus();
    bool ok() const { return rep == nullptr; }
    std::string text() const;
};
static_assert(sizeof(SpStatus) == sizeof(sentencepiece::util::Status), "Status layout");

// The entry points of libsentencepiece.so.0 used here, by their Itanium-mangled names (the
// library's C++ ABI; member functions take `this` first, after the hidden return pointer).
// Calling a virtual member through its symbol is fine: the object's type is exactly
// SentencePieceProcessor.
struct Api {
    void (*construct)(void*);
    void (*destruct)(void*);
    SpStatus (*load)(void*, std::string_view);
    SpStatus (*encodeIds)(const void*, std::string_view, std::vector<int>*);
    SpStatus (*encodePieces)(const void*, std::string_view, std::vector<std::string>*);
    SpStatus (*decodeIds)(const void*, const std::vector<int>&, std::string*);
    int (*pieceSize)(const void*);
    const std::string& (*idToPiece)(const void*, int);
    float (*score)(const void*, int);
    bool (*isUnknown)(const void*, int);
    bool (*isControl)(const void*, int);
    bool (*isUnused)(const void*, int);
    bool (*isByte)(const void*, int);
    int (*bosId)(const void*);
    int (*eosId)(const void*);
    std::string (*serializedModelProto)(const void*);
    std::string (*statusToString)(const void*);
    void (*statusDestruct)(void*);
};

#ifndef LATMIX_SENTENCEPIECE_NO_DEEPBIND
#if defined(__SANITIZE_ADDRESS__)
#define LATMIX_ASAN_DLOPEN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LATMIX_ASAN_DLOPEN 1
#endif
#endif

// dlopen(lib, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND). AddressSanitizer's dlopen interceptor ends
// the process on RTLD_DEEPBIND (google/sanitizers#611: a deep-bound library's malloc may be
// libc's rather than the runtime's); under ASan (the `sanitize` preset) the call goes to glibc's
// own dlopen, looked up in libc.so.6 (glibc >= 2.34), past the interceptor. What that costs ASan
// is said in util/SanitizerDefaults.cpp (alloc_dealloc_mismatch=0).
void* openDeepBound(const char* lib) {
    constexpr int flags = RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND;
#ifdef LATMIX_ASAN_DLOPEN
    using Dlopen = void* (*)(const char*, int);
    if (void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD)) {
        if (auto real = reinterpret_cast<Dlopen>(dlsym(libc, "dlopen"))) return real(lib, flags);
    }
#endif
    return dlopen(lib, flags);
}
#endif

const Api& api() {
    static const Api a = [] {
        const char* lib = "libsentencepiece.so.0";
        // LOCAL: its symbols (protobuf-lite included) stay out of the global scope, so
        // libtorch's libprotobuf keeps resolving to itself. DEEPBIND: its own references resolve
        // to its own definitions first, not to libprotobuf's (without it the library aborts while
        // loading: "compiled against version 3.14.0 of the Protocol Buffer runtime ... installed
        // version (3.21.12)"). Sanitized builds without libtorch (tests/fuzz) define
        // LATMIX_SENTENCEPIECE_NO_DEEPBIND.
#ifdef LATMIX_SENTENCEPIECE_NO_DEEPBIND
        void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
#else
        void* h = openDeepBound(lib);
#endif
        if (!h) throw std::runtime_error(std::string("cannot load ") + lib + " (Debian package libsentencepiece0): " + dlerror());
        const auto sym = [&](auto& fn, const char* name) {
            void* p = dlsym(h, name);
            if (!p) throw std::runtime_error(std::string(lib) + " lacks " + name + " (a SentencePiece other than 0.1.9x?)");
            fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
        };
        Api r{};
        sym(r.construct, "_ZN13sentencepiece22SentencePieceProcessorC1Ev");
        sym(r.destruct, "_ZN13sentencepiece22SentencePieceProcessorD1Ev");
        sym(r.load, "_ZN13sentencepiece22SentencePieceProcessor4LoadESt17basic_string_viewIcSt11char_traitsIcEE");
        sym(r.encodeIds, "_ZNK13sentencepiece22SentencePieceProcessor6EncodeESt17basic_string_viewIcSt11char_traitsIcEEPSt6vectorIiSaIiEE");
        sym(r.encodePieces, "_ZNK13sentencepiece22SentencePieceProcessor6EncodeESt17basic_string_viewIcSt11char_traitsIcEEPSt6vectorINSt7__cxx1112basic_stringIcS3_SaIcEEESaIS9_EE");
        sym(r.decodeIds, "_ZNK13sentencepiece22SentencePieceProcessor6DecodeERKSt6vectorIiSaIiEEPNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE");
        sym(r.pieceSize, "_ZNK13sentencepiece22SentencePieceProcessor12GetPieceSizeEv");
        sym(r.idToPiece, "_ZNK13sentencepiece22SentencePieceProcessor9IdToPieceB5cxx11Ei");
        sym(r.score, "_ZNK13sentencepiece22SentencePieceProcessor8GetScoreEi");
        sym(r.isUnknown, "_ZNK13sentencepiece22SentencePieceProcessor9IsUnknownEi");
        sym(r.isControl, "_ZNK13sentencepiece22SentencePieceProcessor9IsControlEi");
        sym(r.isUnused, "_ZNK13sentencepiece22SentencePieceProcessor8IsUnusedEi");
        sym(r.isByte, "_ZNK13sentencepiece22SentencePieceProcessor6IsByteEi");
        sym(r.bosId, "_ZNK13sentencepiece22SentencePieceProcessor6bos_idEv");
        sym(r.eosId, "_ZNK13sentencepiece22SentencePieceProcessor6eos_idEv");
        sym(r.serializedModelProto, "_ZNK13sentencepiece22SentencePieceProcessor22serialized_model_protoB5cxx11Ev");
        sym(r.statusToString, "_ZNK13sentencepiece4util6Status8ToStringB5cxx11Ev");
        sym(r.statusDestruct, "_ZN13sentencepiece4util6StatusD1Ev");
        return r;
    }();
    return a;
}

SpStatus::~SpStatus() {
    if (rep) api().statusDestruct(this);
}

std::string SpStatus::text() const { return ok() ? std::string("OK") : api().statusToString(this); }

// One sentencepiece::SentencePieceProcessor living in storage owned here.
class Spp {
public:
    explicit Spp(const std::string& path) : m_path(path) {
        std::error_code ec;
        if (!std::filesystem::is_regular_file(path, ec)) throw std::runtime_error("tokenizer file not found: " + path);
        const Api& a = api();
        a.construct(m_mem.get());
        std::string why;
        try {
            const SpStatus st = a.load(m_mem.get(), path);
            if (!st.ok()) why = st.text().empty() ? "unknown error" : st.text();
        } catch (const std::exception& e) {
            // libsentencepiece throws from its double-array trie on some damaged models ("failed
            // to insert key: zero-length key", found by tests/fuzz/fuzz_tokenizer_model).
            why = e.what();
        }
        if (!why.empty()) {
            a.destruct(m_mem.get());
            throw std::runtime_error(path + ": not a SentencePiece model: " + why);
        }
    }
    ~Spp() { api().destruct(m_mem.get()); }
    Spp(const Spp&) = delete;
    Spp& operator=(const Spp&) = delete;
    const void* get() const { return m_mem.get(); }
    const std::string& path() const { return m_path; }
    void check(const SpStatus& st, const char* what) const {
        if (!st.ok()) throw std::runtime_error(m_path + ": SentencePiece " + what + " failed: " + st.text());
    }

private:
    std::string m_path;
    // operator new[] aligns to __STDCPP_DEFAULT_NEW_ALIGNMENT__ (16), enough for the class.
    std::unique_ptr<unsigned char[]> m_mem{new unsigned char[sizeof(sentencepiece::SentencePieceProcessor)]};
};

// The few fields of sentencepiece_model.proto the converter needs, read straight from the
// protobuf wire format (Debian ships no sentencepiece_model.pb.h). Field numbers from
// sentencepiece_model.proto: ModelProto{pieces=1, trainer_spec=2, normalizer_spec=3};
// SentencePiece{piece=1, score=2, type=3}; TrainerSpec{model_type=3,
// treat_whitespace_as_suffix=24, byte_fallback=35}; NormalizerSpec{name=1,
// precompiled_charsmap=2, add_dummy_prefix=3, remove_extra_whitespaces=4, escape_whitespaces=5}.
// Defaults are proto2's declared defaults.
struct ProtoInfo {
    std::vector<int> types; // SentencePiece.Type per id (NORMAL when absent)
    int modelType = 1;      // UNIGRAM
    bool treatWhitespaceAsSuffix = false;
    std::string normalizerName;
    bool hasCharsmap = false;
    bool addDummyPrefix = true;
    bool removeExtraWhitespaces = true;
    bool escapeWhitespaces = true;
};

class Wire {
public:
    Wire(const char* p, std::size_t n, const std::string& file)
        : m_p(reinterpret_cast<const unsigned char*>(p)), m_end(m_p + n), m_file(file) {}
    bool done() const { return m_p >= m_end; }
    std::uint64_t varint() {
        std::uint64_t v = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            need(1);
            const unsigned char b = *m_p++;
            v |= static_cast<std::uint64_t>(b & 0x7F) << shift;
            if (!(b & 0x80)) return v;
        }
        bad();
    }
    // Next field: number and wire type.
    void tag(std::uint32_t& field, int& wire) {
        const std::uint64_t t = varint();
        field = static_cast<std::uint32_t>(t >> 3);
        wire = static_cast<int>(t & 7);
    }
    Wire sub() {
        const std::uint64_t n = varint();
        need(n);
        Wire w(reinterpret_cast<const char*>(m_p), n, m_file);
        m_p += n;
        return w;
    }
    std::string bytes() {
        Wire w = sub();
        return std::string(reinterpret_cast<const char*>(w.m_p), static_cast<std::size_t>(w.m_end - w.m_p));
    }
    float fixed32() {
        need(4);
        std::uint32_t u = static_cast<std::uint32_t>(m_p[0]) | static_cast<std::uint32_t>(m_p[1]) << 8 |
                          static_cast<std::uint32_t>(m_p[2]) << 16 | static_cast<std::uint32_t>(m_p[3]) << 24;
        m_p += 4;
        float f;
        std::memcpy(&f, &u, 4);
        return f;
    }
    void skip(int wire) {
        switch (wire) {
        case 0: varint(); break;
        case 1: need(8); m_p += 8; break;
        case 2: sub(); break;
        case 5: need(4); m_p += 4; break;
        default: bad();
        }
    }

private:
    void need(std::uint64_t n) const {
        if (static_cast<std::uint64_t>(m_end - m_p) < n) bad();
    }
    [[noreturn]] void bad() const { throw std::runtime_error(m_file + ": malformed SentencePiece model protobuf"); }
    const unsigned char* m_p;
    const unsigned char* m_end;
    std::string m_file;
};

ProtoInfo readProto(const std::string& serialized, const std::string& file) {
    ProtoInfo info;
    Wire top(serialized.data(), serialized.size(), file);
    while (!top.done()) {
        std::uint32_t f;
        int w;
        top.tag(f, w);
        if (f == 1 && w == 2) {
            Wire piece = top.sub();
            int type = 1;
            while (!piece.done()) {
                std::uint32_t pf;
                int pw;
                piece.tag(pf, pw);
                if (pf == 3 && pw == 0) type = static_cast<int>(piece.varint());
                else piece.skip(pw);
            }
            info.types.push_back(type);
        } else if (f == 2 && w == 2) {
            Wire t = top.sub();
            while (!t.done()) {
                std::uint32_t tf;
                int tw;
                t.tag(tf, tw);
                if (tf == 3 && tw == 0) info.modelType = static_cast<int>(t.varint());
                else if (tf == 24 && tw == 0) info.treatWhitespaceAsSuffix = t.varint() != 0;
                else t.skip(tw);
            }
        } else if (f == 3 && w == 2) {
            Wire n = top.sub();
            while (!n.done()) {
                std::uint32_t nf;
                int nw;
                n.tag(nf, nw);
                if (nf == 1 && nw == 2) info.normalizerName = n.bytes();
                else if (nf == 2 && nw == 2) info.hasCharsmap = !n.bytes().empty();
                else if (nf == 3 && nw == 0) info.addDummyPrefix = n.varint() != 0;
                else if (nf == 4 && nw == 0) info.removeExtraWhitespaces = n.varint() != 0;
                else if (nf == 5 && nw == 0) info.escapeWhitespaces = n.varint() != 0;
                else n.skip(nw);
            }
        } else {
            top.skip(w);
        }
    }
    return info;
}

} // namespace

struct SentencePieceTokenizer::Processor : Spp {
    using Spp::Spp;
};

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& modelPath)
    : m_path(modelPath), m_sp(std::make_unique<Processor>(modelPath)) {}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::vector<int> SentencePieceTokenizer::encode(const std::string& text, bool addBos) const {
    const Api& a = api();
    std::vector<int> ids;
    m_sp->check(a.encodeIds(m_sp->get(), text, &ids), "encode");
    const int bos = a.bosId(m_sp->get());
    if (addBos && bos >= 0) ids.insert(ids.begin(), bos);
    return ids;
}

std::vector<std::string> SentencePieceTokenizer::encodePieces(const std::string& text) const {
    std::vector<std::string> pieces;
    m_sp->check(api().encodePieces(m_sp->get(), text, &pieces), "encode");
    return pieces;
}

std::string SentencePieceTokenizer::decode(const std::vector<int>& ids) const {
    const Api& a = api();
    const int n = a.pieceSize(m_sp->get());
    for (int id : ids)
        if (id < 0 || id >= n)
            throw std::runtime_error(m_path + ": cannot decode id " + std::to_string(id) + " (not in the vocabulary)");
    std::string out;
    m_sp->check(a.decodeIds(m_sp->get(), ids, &out), "decode");
    return out;
}

int SentencePieceTokenizer::vocabSize() const { return api().pieceSize(m_sp->get()); }
int SentencePieceTokenizer::bosId() const { return api().bosId(m_sp->get()); }
int SentencePieceTokenizer::eosId() const { return api().eosId(m_sp->get()); }

SpmVocabulary readSentencePieceVocabulary(const std::string& modelPath) {
    const Spp spp(modelPath);
    const Api& a = api();
    const void* sp = spp.get();
    const ProtoInfo info = readProto(a.serializedModelProto(sp), modelPath);
    const auto refuse = [&](const std::string& what) {
        throw std::runtime_error(modelPath + ": cannot read as a BPE vocabulary: " + what);
    };
    if (info.modelType != 2) refuse("trainer_spec.model_type is " + std::to_string(info.modelType) + ", not BPE (2)");
    if (info.treatWhitespaceAsSuffix) refuse("trainer_spec.treat_whitespace_as_suffix is set");
    // Only the identity normalizer maps onto Prepend + Replace; nmt_nfkc & co. need
    // SentencePiece's precompiled character map.
    if (info.hasCharsmap || (info.normalizerName != "identity" && !info.normalizerName.empty()))
        refuse("normalizer_spec.name '" + info.normalizerName + "' (only 'identity' is supported)");
    if (info.removeExtraWhitespaces) refuse("normalizer_spec.remove_extra_whitespaces is set");
    if (!info.escapeWhitespaces) refuse("normalizer_spec.escape_whitespaces is off");
    const int n = a.pieceSize(sp);
    if (static_cast<int>(info.types.size()) != n) refuse("piece count differs between the API and the protobuf");

    SpmVocabulary v;
    v.pieces.resize(static_cast<std::size_t>(n));
    for (int id = 0; id < n; ++id) {
        auto& p = v.pieces[static_cast<std::size_t>(id)];
        p.piece = a.idToPiece(sp, id);
        p.score = a.score(sp, id);
        // The API answers for every type but USER_DEFINED, which only the protobuf tells apart.
        if (a.isUnknown(sp, id)) p.type = SpmPiece::Type::Unknown;
        else if (a.isControl(sp, id)) p.type = SpmPiece::Type::Control;
        else if (a.isByte(sp, id)) p.type = SpmPiece::Type::Byte;
        else if (a.isUnused(sp, id)) p.type = SpmPiece::Type::Unused;
        else if (info.types[static_cast<std::size_t>(id)] == 4) p.type = SpmPiece::Type::UserDefined;
        else p.type = SpmPiece::Type::Normal;
    }
    v.addDummyPrefix = info.addDummyPrefix;
    v.bosId = a.bosId(sp);
    v.eosId = a.eosId(sp);
    return v;
}

void convertSentencePieceModel(const std::string& modelPath, const std::string& tokenizerJsonOut) {
    const SpmVocabulary v = readSentencePieceVocabulary(modelPath);
    SpmJsonOptions opt;
    opt.addDummyPrefix = v.addDummyPrefix;
    opt.bosId = v.bosId;
    opt.eosId = v.eosId;
    writeSentencePieceBpeJson(v.pieces, opt, tokenizerJsonOut, modelPath);
}

} // namespace latmix::tokenizer
