#include "util/AtomicFile.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>

namespace fs = std::filesystem;

namespace latmix::util {

void makeParentFolder(const std::string& path) {
    const fs::path target = fs::path(path).lexically_normal();
    fs::path parent = target.filename().empty() ? target.parent_path().parent_path() : target.parent_path();
    if (parent.empty()) return;
    std::error_code ec;
    fs::create_directories(parent, ec);
    if (ec)
        throw std::runtime_error("cannot create folder '" + parent.string() + "': " + ec.message() +
                                 "; check the path and permissions");
}

AtomicFile::AtomicFile(std::string path) : m_path(std::move(path)), m_temp(m_path + ".partial") {}

AtomicFile::~AtomicFile() {
    if (!m_done) discard();
}

void AtomicFile::commit() {
    if (m_done) throw std::logic_error("AtomicFile: '" + m_path + "' was already committed or discarded");
    if (std::rename(m_temp.c_str(), m_path.c_str()) != 0) {
        const int err = errno;
        discard();
        throw std::runtime_error("cannot rename '" + m_temp + "' to '" + m_path + "': " + std::strerror(err) +
                                 "; check free disk space and permissions");
    }
    m_done = true;
}

void AtomicFile::discard() noexcept {
    std::error_code ec;
    fs::remove(m_temp, ec);
    m_done = true;
}

void writeFileAtomically(const std::string& path, const std::string& bytes) {
    AtomicFile file(path);
    writeTextFile(file.tempPath(), bytes);
    file.commit();
}

std::string readTextFile(const std::string& path, const std::string& what) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error(what + " '" + path + "' is missing or unreadable");
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

void writeTextFile(const std::string& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error("cannot write '" + path + "': " + std::strerror(errno) + "; check the path and permissions");
    out << text;
    out.close();
    if (!out) throw std::runtime_error("cannot write '" + path + "'; check free disk space and permissions");
}

std::string makeTempSibling(const std::string& finalDir) {
    fs::path target = fs::path(finalDir).lexically_normal();
    if (target.filename().empty()) target = target.parent_path(); // "dir/" → "dir"
    makeParentFolder(target.string());
    fs::path parent = target.parent_path();
    if (parent.empty()) parent = ".";
    std::string pattern = (parent / ("." + target.filename().string() + ".tmp-XXXXXX")).string();
    if (!::mkdtemp(pattern.data()))
        throw std::runtime_error("cannot create a temporary folder next to '" + target.string() +
                                 "': " + std::strerror(errno) + "; check that '" + parent.string() + "' is writable");
    // mkdtemp creates 0700; the finished folder is an ordinary one (rwxr-xr-x, less the umask).
    // The umask is read from /proc (umask() would change it, racing other threads); 022 if absent.
    mode_t mask = 022;
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);)
        if (line.rfind("Umask:", 0) == 0) mask = static_cast<mode_t>(std::stoul(line.substr(6), nullptr, 8));
    ::chmod(pattern.c_str(), 0777 & ~mask);
    return pattern;
}

// POSIX nftw, not std::filesystem::remove_all. PyTorch's wheels (libtorch.so, built with
// manylinux's devtoolset) export their own copy of std::filesystem::remove_all(path, error_code&),
// and an executable that names libtorch.so before libstdc++ binds its calls to that copy; on the
// H100/H200 machine with PyTorch 2.11 it jumped to address 0 as soon as the folder had entries
// (every quantize run with a spill folder crashed there: docs/research/results.md, "GPU"). libc's walk has
// no such twin. FTW_PHYS: a symbolic link is removed, never followed; FTW_DEPTH: a folder after
// its entries.
void removeTreeQuietly(const std::string& dir) noexcept {
    if (dir.empty()) return;
    const auto removeEntry = [](const char* path, const struct stat*, int, struct FTW*) -> int {
        ::remove(path); // errors ignored: the walk goes on and removes what it can
        return 0;
    };
    ::nftw(dir.c_str(), removeEntry, 32, FTW_DEPTH | FTW_PHYS);
}

void replaceDirectory(const std::string& tmp, const std::string& finalDir) {
    fs::path target = fs::path(finalDir).lexically_normal();
    if (target.filename().empty()) target = target.parent_path();
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(target, ec))) {
        if (::rename(tmp.c_str(), target.c_str()) != 0)
            throw std::runtime_error("cannot rename '" + tmp + "' to '" + target.string() + "': " + std::strerror(errno));
        return;
    }
    if (!fs::is_directory(fs::symlink_status(target, ec)))
        throw std::runtime_error("'" + target.string() + "' exists and is not a folder; remove it or choose another path");
    // Atomic swap: at every moment target is either the old or the new complete folder.
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
        removeTreeQuietly(tmp); // now holds the old content
        return;
    }
    if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
        throw std::runtime_error("cannot replace '" + target.string() + "' by '" + tmp + "': " + std::strerror(errno));
    // File systems without RENAME_EXCHANGE: move the old folder aside, then the new one in. The
    // final name is briefly absent, never partial.
    std::string aside = tmp + ".old";
    if (::rename(target.c_str(), aside.c_str()) != 0)
        throw std::runtime_error("cannot move '" + target.string() + "' aside: " + std::strerror(errno));
    if (::rename(tmp.c_str(), target.c_str()) != 0) {
        const int err = errno;
        ::rename(aside.c_str(), target.c_str());
        throw std::runtime_error("cannot rename '" + tmp + "' to '" + target.string() + "': " + std::strerror(err));
    }
    removeTreeQuietly(aside);
}

} // namespace latmix::util
