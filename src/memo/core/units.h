// Byte sizes as people write them on a command line ("1.5GiB", "512MiB", "80GB", "4096"). Binary
// (KiB, MiB, GiB, TiB, and the bare K, M, G, T) and decimal (kB, MB, GB, TB) units; no unit or B
// means bytes. Not a general unit library: only byte counts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace memo {

// "1.5GiB" -> 1610612736. Case-insensitive unit, optional space before it. Throws ConfigError
// naming the text and the accepted forms for anything else (negative, empty, unknown unit, a
// value over 2^62 bytes). Fractional results round down to whole bytes.
int64_t parse_bytes(std::string_view text);
// The same for a command-line flag: the error names the flag first ("--host-memory '1.5GX': ...").
int64_t parse_bytes(std::string_view text, std::string_view flag);

// A count of tokens as --lengths and --seq-schedule write it: a positive integer with an optional
// binary K, M or G ("4K" = 4096, "1M" = 1048576; either case). None for anything else (empty,
// zero, negative, a fraction, another suffix, a value over 2^62).
std::optional<int64_t> parse_token_count(std::string_view text);

// A size for a human: the largest binary unit that keeps the value >= 1, two decimals
// ("1.50 GiB", "12.00 MiB", "512 B").
std::string format_bytes(int64_t bytes);

// A duration for progress lines: "42s", "3m07s", "2h05m".
std::string duration_str(double seconds);

// A wall-clock duration as a job limit is written ("3h50m", "90m", "45s", "1h30m15s"; a bare
// number is seconds), in seconds. Each unit once, in the order h, m, s. Throws ConfigError naming
// the flag and the text for anything else (empty, zero, negative, an unknown unit).
double parse_duration(std::string_view text, std::string_view flag);

// `word` as a POSIX shell reads it back as one word: as it is where every byte is one a shell
// leaves alone (letters, digits, and _ - . / : , + = @ %), else in single quotes, each ' written
// as '\''. For commands memo prints for a user to paste (the one that resumes a run).
std::string shell_word(std::string_view word);

// path made absolute against the working directory (no file is read: a glob's pattern stays
// one; "..", which a symbolic link before it would change, is kept); empty stays empty. For paths a
// run records and a later process, perhaps elsewhere, reads back (a checkpoint's data and log, a
// sweep's setup).
std::string absolute_or_empty(const std::string& path);

}  // namespace memo
