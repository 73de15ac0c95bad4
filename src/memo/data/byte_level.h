// GPT-2's byte-level alphabet: each of the 256 byte values is shown as one printable Unicode
// character (bytes_to_unicode in openai/gpt-2 encoder.py), so that vocab.bpe, encoder.json and
// Hugging Face tokenizer.json can spell any byte string as text. Not an encoder of text.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace memo {

// Code point that stands for byte b: printable Latin-1 bytes stand for themselves, the other 68
// map to U+0100 + their order.
std::array<char32_t, 256> byte_level_alphabet();

// The raw bytes spelled by `text` (UTF-8 of byte-level characters), or nullopt if a character is
// outside the alphabet or the UTF-8 is invalid.
std::optional<std::string> byte_level_decode(std::string_view text);

// The byte-level spelling (UTF-8) of raw bytes.
std::string byte_level_encode(std::string_view bytes);

}  // namespace memo
