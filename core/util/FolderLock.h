#pragma once
// One writer per output: a command that writes a run folder or an export target holds its lock
// for as long as it writes, so that a second process aimed at the same path stops at once with
// an error naming the holder instead of interleaving files with it.
//
// The lock is the file "<parent>/.<name>.lock" beside the target (hidden, so run scans skip it;
// beside rather than inside because an export replaces its target folder whole). It is held with
// flock(2), which the kernel releases when the holder ends in any way, kill -9 included, and it
// holds the holder's pid, host, start time and command line for the message. A lock file that
// nobody holds was left by a process that ended without removing it (a stale lock): it is taken
// over and staleNote() says whose it was.
#include <string>

namespace latmix::util {

class FolderLock {
public:
    // Takes the lock of `target` (a folder or file this process is about to write; its parent
    // folders are created). `what` names it in messages ("run folder", "export folder").
    // Throws std::runtime_error naming the target, the holder (pid, host, start time, command)
    // and what to do when another process holds it.
    FolderLock(const std::string& target, const std::string& what, const std::string& command);
    ~FolderLock(); // removes the lock file, then releases it
    FolderLock(const FolderLock&) = delete;
    FolderLock& operator=(const FolderLock&) = delete;

    const std::string& lockPath() const { return m_path; }
    // Non-empty when a stale lock was taken over: "took over the lock ... left by pid P on host H
    // (started T, `command`), which ended without releasing it".
    const std::string& staleNote() const { return m_staleNote; }

    // The lock file of target: "<parent>/.<name>.lock".
    static std::string lockPathOf(const std::string& target);

private:
    std::string m_path;
    std::string m_staleNote;
    int m_fd = -1;
};

// This machine's name as locks and run markers record it ("unknown host" when it has none).
std::string hostName();

} // namespace latmix::util
