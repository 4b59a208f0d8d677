#include "util/FolderLock.h"

#include "util/Text.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace latmix::util {
namespace fs = std::filesystem;

namespace {

std::string readAll(int fd) {
    std::string s;
    char buf[4096];
    ::lseek(fd, 0, SEEK_SET);
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0 && s.size() < 65536;) s.append(buf, static_cast<std::size_t>(n));
    return s;
}

// "pid 123\nhost h\nstarted T\ncommand c\n" -> the holder as a phrase for messages.
std::string holderText(const std::string& content) {
    std::string pid = "?", host = "?", started = "?", command;
    std::size_t pos = 0;
    while (pos < content.size()) {
        std::size_t end = content.find('\n', pos);
        if (end == std::string::npos) end = content.size();
        const std::string line = content.substr(pos, end - pos);
        const std::size_t sp = line.find(' ');
        if (sp != std::string::npos) {
            const std::string key = line.substr(0, sp), value = line.substr(sp + 1);
            if (key == "pid") pid = value;
            else if (key == "host") host = value;
            else if (key == "started") started = value;
            else if (key == "command") command = value;
        }
        pos = end + 1;
    }
    std::string s = "pid " + pid + " on host " + host + " (started " + started;
    if (!command.empty()) s += ", `" + command + "`";
    return s + ")";
}

} // namespace

std::string hostName() {
    char buf[256] = {};
    if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown host";
    return buf;
}

std::string FolderLock::lockPathOf(const std::string& target) {
    fs::path t = fs::path(target).lexically_normal();
    if (t.filename().empty()) t = t.parent_path(); // "dir/" -> "dir"
    fs::path parent = t.parent_path();
    if (parent.empty()) parent = ".";
    return (parent / ("." + t.filename().string() + ".lock")).string();
}

FolderLock::FolderLock(const std::string& target, const std::string& what, const std::string& command)
    : m_path(lockPathOf(target)) {
    std::error_code ec;
    fs::create_directories(fs::path(m_path).parent_path(), ec);
    // A holder that ends unlinks the file before it lets go of it: a lock taken on a file that
    // is no longer the one at m_path is worth nothing, so take it again on the new one.
    for (int attempt = 0; attempt < 20; ++attempt) {
        const int fd = ::open(m_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0)
            throw std::runtime_error("cannot create the lock file '" + m_path + "' of " + what + " '" + target +
                                     "': " + std::strerror(errno) + "; check that its folder is writable");
        if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
            const int err = errno;
            const std::string holder = readAll(fd);
            ::close(fd);
            if (err == EWOULDBLOCK)
                throw std::runtime_error(what + " '" + target + "' is being written by another latmix process: " +
                                         holderText(holder) + ". Wait for it to finish or stop it, or choose "
                                         "another path (the lock is '" + m_path + "')");
            throw std::runtime_error("cannot lock '" + m_path + "' for " + what + " '" + target +
                                     "': " + std::strerror(err));
        }
        struct stat held {}, now {};
        if (::fstat(fd, &held) != 0 || ::stat(m_path.c_str(), &now) != 0 || held.st_ino != now.st_ino ||
            held.st_dev != now.st_dev) {
            ::close(fd); // removed (or replaced) between open and flock: its holder just finished
            continue;
        }
        const std::string previous = readAll(fd);
        if (!previous.empty())
            m_staleNote = "took over the lock of " + what + " '" + target + "' left by " + holderText(previous) +
                          ", which ended without releasing it";
        const std::string content = "pid " + std::to_string(::getpid()) + "\nhost " + hostName() + "\nstarted " +
                                    utcTimestamp() + "\ncommand " + command + "\n";
        if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, content.data(), content.size(), 0) !=
                                           static_cast<ssize_t>(content.size())) {
            const int err = errno;
            ::unlink(m_path.c_str());
            ::close(fd);
            throw std::runtime_error("cannot write the lock file '" + m_path + "': " + std::strerror(err) +
                                     "; check free disk space");
        }
        m_fd = fd;
        return;
    }
    throw std::runtime_error("cannot lock " + what + " '" + target + "': its lock file '" + m_path +
                             "' keeps being replaced; is something else removing it?");
}

FolderLock::~FolderLock() {
    if (m_fd < 0) return;
    ::unlink(m_path.c_str()); // first, while still held: see the constructor's inode check
    ::close(m_fd);
}

} // namespace latmix::util
