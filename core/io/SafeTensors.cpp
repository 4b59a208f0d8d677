// safetensors reader and writer (SPEC §8: weights are read through mmap, never copied whole).
//
// Layout of a file: 8 bytes little-endian u64 N, N bytes of JSON header, then the data section.
// io/SafeTensorsHeader validates the header before a single tensor byte is touched.
#include "io/SafeTensors.h"

#include "util/AtomicFile.h"
#include "util/Text.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <unordered_set>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace latmix::io {

using util::shapeText;

// The read-only mapping of one file. Tensors returned by tensor() hold a shared_ptr to it, so
// the mapping outlives the SafeTensorsFile when weights are still in use.
// The live mappings, by start address: releaseMappedPages only ever touches memory in one.
namespace {
std::mutex& mappingsMutex() {
    static std::mutex m;
    return m;
}
std::map<std::uintptr_t, std::uintptr_t>& liveMappings() { // begin -> end
    static std::map<std::uintptr_t, std::uintptr_t> m;
    return m;
}
} // namespace

struct SafeTensorsFile::Mapping {
    void* addr = nullptr;
    std::size_t size = 0;
    void registerLive() {
        std::lock_guard<std::mutex> lock(mappingsMutex());
        const auto b = reinterpret_cast<std::uintptr_t>(addr);
        liveMappings()[b] = b + size;
    }
    ~Mapping() {
        if (addr && size) {
            {
                std::lock_guard<std::mutex> lock(mappingsMutex());
                liveMappings().erase(reinterpret_cast<std::uintptr_t>(addr));
            }
            ::munmap(addr, size);
        }
    }
    const unsigned char* bytes() const { return static_cast<const unsigned char*>(addr); }
};

void releaseMappedPages(const at::Tensor& t) {
    if (!t.defined() || !t.device().is_cpu() || t.numel() == 0) return;
    const auto begin = reinterpret_cast<std::uintptr_t>(t.data_ptr());
    const auto end = begin + static_cast<std::uintptr_t>(t.numel()) * t.element_size();
    std::lock_guard<std::mutex> lock(mappingsMutex());
    auto it = liveMappings().upper_bound(begin);
    if (it == liveMappings().begin()) return;
    --it;
    if (begin < it->first || end > it->second) return; // not (wholly) inside a mapping: heap memory
    // The mapping is private and read-only, so no page holds anything but the file's bytes:
    // dropping pages of a neighbouring tensor at either end only costs a later re-read.
    static const std::uintptr_t page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    const std::uintptr_t a = std::max(it->first, begin & ~(page - 1));
    const std::uintptr_t b = std::min(it->second, (end + page - 1) & ~(page - 1));
    if (b > a) ::madvise(reinterpret_cast<void*>(a), b - a, MADV_DONTNEED);
}

namespace {

// The libtorch type of each safetensors dtype (io/SafeTensorsHeader's table) that libtorch 1.13
// and 2.x both have. Those libtorch lacks are kept as bytes.
std::vector<SafeTensorsDtype> makeDtypes() {
    const std::pair<const char*, at::ScalarType> torchTypes[] = {
        {"F64", at::kDouble}, {"F32", at::kFloat}, {"F16", at::kHalf}, {"BF16", at::kBFloat16}, {"I64", at::kLong},
        {"I32", at::kInt},    {"I16", at::kShort}, {"I8", at::kChar},  {"U8", at::kByte},       {"BOOL", at::kBool},
    };
    std::vector<SafeTensorsDtype> r;
    for (const auto& spec : safeTensorsDtypeSpecs()) {
        SafeTensorsDtype d{spec.name, spec.itemSize, false, at::kByte};
        for (const auto& [name, type] : torchTypes)
            if (std::strcmp(name, spec.name) == 0) d.inLibtorch = true, d.type = type;
        r.push_back(d);
    }
    return r;
}

const std::vector<SafeTensorsDtype>& dtypes() {
    static const std::vector<SafeTensorsDtype> table = makeDtypes();
    return table;
}

// The names libtorch has (what the tensor writer takes).
std::string libtorchDtypeList() {
    std::string s;
    for (const auto& d : dtypes())
        if (d.inLibtorch) s += (s.empty() ? "" : ", ") + std::string(d.name);
    return s;
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
    throw std::runtime_error("safetensors file '" + path + "': " + what);
}

[[noreturn]] void failTensor(const std::string& path, const std::string& tensor, const std::string& what) {
    fail(path, "tensor '" + tensor + "': " + what);
}

// write() until everything is out, retrying on EINTR and short writes.
void writeAll(int fd, const void* data, std::size_t n, const std::string& path) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
        const std::size_t chunk = std::min<std::size_t>(n, std::size_t(1) << 30);
        const ssize_t w = ::write(fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            throw std::runtime_error("cannot write '" + path + "': " + std::strerror(errno) +
                                     "; check free disk space and permissions");
        }
        p += w;
        n -= static_cast<std::size_t>(w);
    }
}

} // namespace

const SafeTensorsDtype* safeTensorsDtype(const std::string& name) {
    for (const auto& d : dtypes())
        if (name == d.name) return &d;
    return nullptr;
}

const SafeTensorsDtype* safeTensorsDtype(at::ScalarType type) {
    for (const auto& d : dtypes())
        if (d.inLibtorch && type == d.type) return &d;
    return nullptr;
}

std::shared_ptr<SafeTensorsFile> SafeTensorsFile::open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno) + "; check the path and permissions");
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int err = errno;
        ::close(fd);
        fail(path, std::string("cannot stat: ") + std::strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        fail(path, "is not a regular file");
    }
    const auto fileSize = static_cast<std::uint64_t>(st.st_size);
    if (fileSize < 8) {
        ::close(fd);
        parseSafeTensorsHeader(path, nullptr, fileSize); // throws: too short for the header length
    }
    auto map = std::make_shared<Mapping>();
    void* addr = ::mmap(nullptr, static_cast<std::size_t>(fileSize), PROT_READ, MAP_PRIVATE, fd, 0);
    const int mapErr = errno;
    ::close(fd); // the mapping keeps its own reference to the file
    if (addr == MAP_FAILED) fail(path, std::string("cannot memory-map: ") + std::strerror(mapErr));
    map->addr = addr;
    map->size = static_cast<std::size_t>(fileSize);
    map->registerLive();

    SafeTensorsHeader header = parseSafeTensorsHeader(path, map->bytes(), fileSize);
    std::shared_ptr<SafeTensorsFile> f(new SafeTensorsFile());
    f->m_path = path;
    f->m_map = map;
    f->m_dataStart = header.dataStart;
    f->m_entries = std::move(header.entries);
    f->m_metadata = std::move(header.metadata);
    for (size_t i = 0; i < f->m_entries.size(); ++i) f->m_index[f->m_entries[i].name] = i;
    return f;
}

SafeTensorsFile::~SafeTensorsFile() = default;

bool SafeTensorsFile::contains(const std::string& name) const { return m_index.count(name) != 0; }

const SafeTensorEntry& SafeTensorsFile::entry(const std::string& name) const {
    auto it = m_index.find(name);
    if (it == m_index.end()) {
        std::string some;
        for (size_t i = 0; i < m_entries.size() && i < 3; ++i) some += (i ? ", '" : "'") + m_entries[i].name + "'";
        failTensor(m_path, name, "no such tensor (the file has " + std::to_string(m_entries.size()) + " tensors" +
                                     (some.empty() ? std::string() : ", e.g. " + some) +
                                     "); check the name or the checkpoint");
    }
    return m_entries[it->second];
}

at::Tensor SafeTensorsFile::tensor(const std::string& name) const {
    const SafeTensorEntry& e = entry(name);
    const SafeTensorsDtype* dt = safeTensorsDtype(e.dtype); // validated in open()
    if (!dt->inLibtorch && dt->itemSize != 1)
        failTensor(m_path, name, "dtype " + e.dtype + " has no libtorch type; read its bytes() instead");
    const auto options = at::TensorOptions().dtype(dt->type).device(at::kCPU);
    if (e.end == e.begin) return at::empty(e.shape, options);
    const unsigned char* p = m_map->bytes() + m_dataStart + e.begin;
    if (reinterpret_cast<std::uintptr_t>(p) % dt->itemSize == 0) {
        // Zero-copy view. The deleter owns a reference to the mapping, which therefore stays
        // mapped for as long as any tensor (or view of one) uses it.
        std::shared_ptr<Mapping> keep = m_map;
        return at::from_blob(const_cast<unsigned char*>(p), e.shape, [keep](void*) mutable { keep.reset(); },
                             options);
    }
    // The header length is not a multiple of the element size (allowed by the format, never
    // written by us or by the reference writer): unaligned element access is undefined, copy.
    auto t = at::empty(e.shape, options);
    std::memcpy(t.data_ptr(), p, e.end - e.begin);
    return t;
}

at::Tensor SafeTensorsFile::bytes(const std::string& name) const {
    const SafeTensorEntry& e = entry(name);
    const auto options = at::TensorOptions().dtype(at::kByte).device(at::kCPU);
    const auto n = static_cast<std::int64_t>(e.end - e.begin);
    if (n == 0) return at::empty({0}, options);
    std::shared_ptr<Mapping> keep = m_map;
    return at::from_blob(const_cast<unsigned char*>(m_map->bytes() + m_dataStart + e.begin), {n},
                         [keep](void*) mutable { keep.reset(); }, options);
}

struct SafeTensorsWriter::State {
    std::string path;
    std::vector<TensorSpec> specs;
    std::vector<std::uint64_t> sizes;
    util::AtomicFile file;
    int fd = -1;
    std::size_t next = 0;
    State(const std::string& p) : path(p), file(p) {}
    [[noreturn]] void fail(const std::string& what) const {
        throw std::runtime_error("writing safetensors file '" + path + "': " + what);
    }
    ~State() {
        if (fd >= 0) ::close(fd); // ~AtomicFile then removes the temporary file
    }
};

SafeTensorsWriter::SafeTensorsWriter(const std::string& path, const std::vector<TensorSpec>& specs,
                                     const std::map<std::string, std::string>& metadata) {
    auto fail = [&](const std::string& what) -> void {
        throw std::runtime_error("writing safetensors file '" + path + "': " + what);
    };
    // Build and validate the whole header before creating any file, so that a bad name or dtype
    // leaves the folder untouched.
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!metadata.empty()) {
        nlohmann::ordered_json m = nlohmann::ordered_json::object();
        for (const auto& [k, v] : metadata) m[k] = v;
        header["__metadata__"] = m;
    }
    std::vector<std::uint64_t> sizes;
    std::unordered_set<std::string> seen;
    std::uint64_t offset = 0;
    for (const auto& t : specs) {
        if (t.name.empty() || t.name == "__metadata__") fail("invalid tensor name '" + t.name + "'");
        if (!seen.insert(t.name).second) fail("tensor '" + t.name + "' appears twice; names must be unique");
        const SafeTensorsDtype* d = safeTensorsDtype(t.dtype);
        if (!d) fail("tensor '" + t.name + "': unknown dtype '" + t.dtype + "'");
        std::uint64_t bytes = d->itemSize;
        for (auto n : t.shape) {
            if (n < 0) fail("tensor '" + t.name + "': negative dimension in shape " + shapeText(t.shape));
            const auto u = static_cast<std::uint64_t>(n);
            if (u != 0 && bytes > std::numeric_limits<std::uint64_t>::max() / u)
                fail("tensor '" + t.name + "': shape " + shapeText(t.shape) + " overflows");
            bytes *= u;
        }
        nlohmann::ordered_json e;
        e["dtype"] = t.dtype;
        e["shape"] = t.shape;
        e["data_offsets"] = {offset, offset + bytes};
        header[t.name] = e;
        sizes.push_back(bytes);
        offset += bytes;
    }
    std::string text = header.dump();
    // Pad with spaces to a multiple of 8 so that the data section (and with it every tensor of
    // an element size up to 8) starts aligned, which lets readers map instead of copy.
    text.append((8 - (8 + text.size()) % 8) % 8, ' ');

    m = std::make_unique<State>(path);
    m->specs = specs;
    m->sizes = std::move(sizes);
    const std::string& tmp = m->file.tempPath();
    m->fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (m->fd < 0)
        throw std::runtime_error("cannot create '" + tmp + "': " + std::strerror(errno) +
                                 "; check that the folder exists and is writable");
    unsigned char len[8];
    const std::uint64_t n = text.size();
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
    writeAll(m->fd, len, 8, tmp);
    writeAll(m->fd, text.data(), text.size(), tmp);
}

SafeTensorsWriter::~SafeTensorsWriter() = default;

std::size_t SafeTensorsWriter::next() const { return m->next; }

void SafeTensorsWriter::write(const at::Tensor& tensor) {
    if (m->fd < 0) m->fail("the file is already finished or failed");
    if (m->next >= m->specs.size())
        m->fail("one tensor more than the " + std::to_string(m->specs.size()) + " of its header");
    const TensorSpec& spec = m->specs[m->next];
    if (!tensor.defined()) m->fail("tensor '" + spec.name + "' was not produced");
    const at::Tensor t = tensor.detach().to(at::kCPU).contiguous();
    const auto bytes = static_cast<std::uint64_t>(t.numel()) * t.element_size();
    if (bytes != m->sizes[m->next])
        m->fail("tensor '" + spec.name + "' has " + std::to_string(bytes) + " bytes, its header entry (" + spec.dtype +
                " " + shapeText(spec.shape) + ") says " + std::to_string(m->sizes[m->next]));
    if (bytes) writeAll(m->fd, t.data_ptr(), static_cast<std::size_t>(bytes), m->file.tempPath());
    releaseMappedPages(t); // a tensor read from a mapped file leaves nothing resident
    ++m->next;
}

void SafeTensorsWriter::finish() {
    if (m->fd < 0) m->fail("the file is already finished or failed");
    if (m->next != m->specs.size())
        m->fail("only " + std::to_string(m->next) + " of " + std::to_string(m->specs.size()) +
                " tensors written (next: '" + m->specs[m->next].name + "')");
    const std::string& tmp = m->file.tempPath();
    if (::fsync(m->fd) != 0) throw std::runtime_error("cannot flush '" + tmp + "' to disk: " + std::strerror(errno));
    const int fd = m->fd;
    m->fd = -1;
    if (::close(fd) != 0) throw std::runtime_error("cannot close '" + tmp + "': " + std::strerror(errno));
    m->file.commit();
}

void writeSafeTensorsStreamed(const std::string& path, const std::vector<TensorSpec>& specs,
                              const std::function<at::Tensor(std::size_t)>& produce,
                              const std::map<std::string, std::string>& metadata) {
    SafeTensorsWriter w(path, specs, metadata);
    for (std::size_t i = 0; i < specs.size(); ++i) w.write(produce(i));
    w.finish();
}

void writeSafeTensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
    std::vector<TensorSpec> specs;
    specs.reserve(tensors.size());
    for (const auto& [name, t] : tensors) {
        if (!t.defined())
            throw std::runtime_error("writing safetensors file '" + path + "': tensor '" + name + "' is undefined");
        const SafeTensorsDtype* dt = safeTensorsDtype(t.scalar_type());
        if (!dt)
            throw std::runtime_error("writing safetensors file '" + path + "': tensor '" + name + "' has dtype " +
                                     std::string(c10::toString(t.scalar_type())) +
                                     ", which safetensors files here cannot hold (supported: " + libtorchDtypeList() +
                                     "); convert it first");
        specs.push_back({name, dt->name, t.sizes().vec()});
    }
    writeSafeTensorsStreamed(path, specs, [&](std::size_t i) { return tensors[i].second; }, metadata);
}

} // namespace latmix::io
