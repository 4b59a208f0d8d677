#pragma once
// Nothing partial that looks complete: every file and folder that core writes goes to a
// temporary name beside its final one and is renamed into place only once it is complete. This
// is the one place that does it (files: AtomicFile; folders: makeTempSibling + replaceDirectory).
#include <string>

namespace latmix::util {

// A file written under a temporary name in the final file's folder ("<path>.partial") and
// renamed over `path` by commit(). Destroyed without commit() (an exception, a cancelled job),
// it removes the temporary file, so `path` is either absent, the old file or the new complete one.
class AtomicFile {
public:
    explicit AtomicFile(std::string path);
    ~AtomicFile();
    AtomicFile(const AtomicFile&) = delete;
    AtomicFile& operator=(const AtomicFile&) = delete;

    const std::string& path() const { return m_path; }
    const std::string& tempPath() const { return m_temp; } // write here
    // Renames the temporary file over path(). Throws naming both files when that fails.
    void commit();
    // Removes the temporary file now (cleanup before rethrowing); commit() is then an error.
    void discard() noexcept;

private:
    std::string m_path, m_temp;
    bool m_done = false;
};

// Makes the folder a file or folder `path` goes into when it is missing, as an export does for
// its output (makeTempSibling for a folder target, exportGguf for the GGUF file); throws naming
// the folder when it cannot. Core's other writes expect their folder to exist.
void makeParentFolder(const std::string& path);

// Writes `bytes` to path through an AtomicFile. Throws naming the file (disk full, permissions).
void writeFileAtomically(const std::string& path, const std::string& bytes);

// Reads a whole file; throws naming the file and `what` it is.
std::string readTextFile(const std::string& path, const std::string& what);

// Writes a file in place (inside a temporary folder that replaceDirectory() then moves).
void writeTextFile(const std::string& path, const std::string& text);

// Creates a hidden temporary folder next to `finalDir` (".NAME.tmp-XXXXXX"), creating the parent
// folders when needed. Throws naming the folder.
std::string makeTempSibling(const std::string& finalDir);

// Puts the complete folder `tmp` in place of `finalDir`: a plain rename when finalDir does not
// exist, else an atomic exchange (renameat2 RENAME_EXCHANGE; two renames where the file system
// lacks it) after which the old content is removed. finalDir never holds a partial folder.
void replaceDirectory(const std::string& tmp, const std::string& finalDir);

// Removes a folder tree, ignoring errors (cleanup paths).
void removeTreeQuietly(const std::string& dir) noexcept;

} // namespace latmix::util
