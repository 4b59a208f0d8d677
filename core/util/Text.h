#pragma once
// Small text helpers: messages and option lists.
#include <cstdint>
#include <string>
#include <vector>

namespace latmix::util {

// "[a, b]" for error messages.
std::string shapeText(const std::vector<std::int64_t>& shape);

// "a, b,,c" split on `separator`, each entry without surrounding spaces and tabs; empty entries
// are kept (the one after a trailing separator too), for the caller to refuse or skip.
std::vector<std::string> splitList(const std::string& text, char separator = ',');

// A double as the shortest decimal that reads back as the same value ("nan", "inf", "-inf" for
// non-finite ones): numbers written for machines (CSV, data-value attributes).
std::string exactNumber(double v);

// The current time as ISO 8601 UTC to the second, "2026-11-25T01:12:01Z": latmix.json's
// "created", an export's time, a lock's start time.
std::string utcTimestamp();

// {"a", "b"} -> "a, b": names listed in messages and help texts.
std::string joinList(const std::vector<std::string>& items, const std::string& separator = ", ");

} // namespace latmix::util
