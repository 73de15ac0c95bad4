// Note [Run files] (cli/run_file.h): TOML run files of memo train, read and written.
#include "memo/cli/run_file.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <set>
#include <sstream>
#include <vector>

#include "memo/core/error.h"
#include "memo/io/checkpoint.h"

namespace memo::cli {
namespace {

// What TOML values a flag takes.
enum class Kind { kInteger, kReal, kText, kBool, kSwitch };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kInteger:
      return "an integer";
    case Kind::kReal:
      return "a number";
    case Kind::kText:
      return "a string";
    case Kind::kBool:
    case Kind::kSwitch:
      return "true or false";
  }
  return "";
}

Kind kind_of(const CLI::Option& o) {
  if (o.get_expected_min() == 0) return Kind::kSwitch;
  const std::string type = o.get_type_name();
  const auto starts = [&](const char* p) { return type.rfind(p, 0) == 0; };
  if (starts("INT") || starts("UINT")) return Kind::kInteger;
  if (starts("FLOAT")) return Kind::kReal;
  if (starts("BOOLEAN")) return Kind::kBool;
  return Kind::kText;
}

// The flags a run file holds: every long-named option but help, --run and --print-run.
bool in_run_file(const CLI::Option& o) {
  if (o.get_lnames().empty()) return false;
  const std::string& name = o.get_lnames().front();
  return name != "help" && name != "help-all" && name != "run" && name != "print-run";
}

const std::string& key_of(const CLI::Option& o) { return o.get_lnames().front(); }

// The shortest of %.15g, %.16g and %.17g that reads back as x.
std::string real_text(double x) {
  char buf[40];
  for (int digits = 15; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // a TOML float, not an integer
  return s;
}

// A TOML value for one of the flag's texts: numbers as numbers (exactly), the rest quoted.
std::string toml_value(Kind kind, const std::string& text) {
  if (kind == Kind::kInteger || kind == Kind::kReal) {
    const char* begin = text.c_str();
    char* end = nullptr;
    if (kind == Kind::kInteger) {
      const long long v = std::strtoll(begin, &end, 10);
      if (end != begin && *end == '\0') return std::to_string(v);
    } else {
      const double v = std::strtod(begin, &end);
      if (end != begin && *end == '\0' && std::isfinite(v)) return real_text(v);
    }
  }
  if (kind == Kind::kBool && (text == "true" || text == "false")) return text;
  std::ostringstream out;
  out << toml::value<std::string>(text);  // quoted and escaped as TOML says
  return out.str();
}

// A switch given on the command line or in a file: the TOML bool that gives its result.
std::string switch_value(const CLI::Option& o) {
  const std::string& result = o.results().back();
  if (o.get_flag_value(key_of(o), "true") == result) return "true";
  if (o.get_flag_value(key_of(o), "false") == result) return "false";
  throw ConfigError(str("--print-run: --", key_of(o), " holds '", result, "'"));
}

std::string option_value(const CLI::Option& o) {
  if (kind_of(o) == Kind::kSwitch) return switch_value(o);
  const std::vector<std::string>& results = o.results();
  // a one-value flag given twice takes the last (CLI11): the file holds that one
  if (results.size() == 1 || o.get_items_expected_max() <= 1)
    return toml_value(kind_of(o), results.back());
  std::string array = "[";
  for (size_t i = 0; i < results.size(); ++i)
    array += (i ? ", " : "") + toml_value(kind_of(o), results[i]);
  return array + "]";
}

// The text a TOML value gives the flag, or an error naming the key and what it takes.
std::string flag_text(const toml::node& value, Kind kind, const std::string& where) {
  const auto wrong = [&] {
    std::ostringstream type;
    type << value.type();  // "integer", "floating-point", "string", "boolean", "array", ...
    const std::string t = type.str();
    return ConfigError(str(where, " is ", t[0] == 'i' || t[0] == 'a' ? "an " : "a ", t,
                           "; it takes ", kind_name(kind)));
  };
  switch (kind) {
    case Kind::kInteger:
      if (const auto v = value.value_exact<int64_t>()) return std::to_string(*v);
      throw wrong();
    case Kind::kReal:
      if (value.is_integer()) return std::to_string(*value.value_exact<int64_t>());
      if (const auto v = value.value_exact<double>()) return real_text(*v);
      throw wrong();
    case Kind::kText:
      if (const auto v = value.value_exact<std::string>()) return *v;
      throw wrong();
    case Kind::kBool:
    case Kind::kSwitch:
      if (const auto v = value.value_exact<bool>()) return *v ? "true" : "false";
      throw wrong();
  }
  throw wrong();
}

// The flag names the command line gives (--key, --key=value), for the keys it overrides.
bool given_on_command_line(const std::vector<std::string>& args, const CLI::Option& o) {
  for (const std::string& a : args)
    for (const std::string& name : o.get_lnames())
      if (a == "--" + name || a.rfind("--" + name + "=", 0) == 0) return true;
  return false;
}

// Whether a flag given on the command line excludes o (--no-checkpoint a file's save-every): the
// command line wins over those keys too.
bool excluded_by_command_line(const CLI::App& cmd, const std::vector<std::string>& args,
                              const CLI::Option& o) {
  for (const CLI::Option* c : cmd.get_options()) {
    if (c == &o || !given_on_command_line(args, *c)) continue;
    const std::set<CLI::Option*>& theirs = c->get_excludes();
    const std::set<CLI::Option*>& ours = o.get_excludes();
    if (std::any_of(theirs.begin(), theirs.end(), [&](const CLI::Option* x) { return x == &o; }) ||
        std::any_of(ours.begin(), ours.end(), [&](const CLI::Option* x) { return x == c; }))
      return true;
  }
  return false;
}

// The keys of the run file at `path` as flags of `cmd`: checked (Note [Run files]), then one
// "--key=text" argument per value.
std::vector<std::string> run_file_flags(const CLI::App& cmd, const std::string& path,
                                        const std::vector<std::string>& command_line) {
  const std::string file = "--run " + path;
  toml::table doc;
  try {
    doc = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    const std::string_view why = e.description();
    if (e.source().begin.line == 0)  // not read at all
      throw ConfigError(str(file, ": ", why));
    throw ConfigError(str(file, ": line ", e.source().begin.line, ", column ",
                          e.source().begin.column, ": ", why));
  }
  const auto flag_of = [&](const std::string& key, const std::string& where) {
    const CLI::Option* o = cmd.get_option_no_throw("--" + key);
    if (!o || !in_run_file(*o))
      throw ConfigError(str(where, ": memo ", cmd.get_name(), " has no flag --", key));
    return o;
  };
  struct Key {
    const CLI::Option* option;
    std::string key;
    std::vector<std::string> texts;
  };
  std::vector<Key> keys;
  for (const auto& [section, node] : doc) {
    const std::string at = str(file, ": line ", node.source().begin.line);
    const toml::table* table = node.as_table();
    if (!table)
      throw ConfigError(str(at, ": ", section.str(), " is outside every section; it goes under [",
                            flag_of(std::string(section.str()), at)->get_group(), "]"));
    for (const auto& [name, value] : *table) {
      const std::string key(name.str());
      const std::string where =
          str(file, ": line ", value.source().begin.line, ": [", section.str(), "] ", key);
      const CLI::Option* o = flag_of(key, where);
      if (o->get_group() != section.str())
        throw ConfigError(str(where, ": --", key, " belongs in [", o->get_group(), "]"));
      std::vector<std::string> texts;
      if (const toml::array* list = value.as_array()) {
        if (o->get_items_expected_max() <= 1)
          throw ConfigError(str(where, ": --", key, " takes one value, not a list"));
        if (list->empty()) throw ConfigError(str(where, ": an empty list; leave the key out"));
        for (const toml::node& element : *list)
          texts.push_back(flag_text(element, kind_of(*o), where));
      } else {
        texts.push_back(flag_text(value, kind_of(*o), where));
      }
      keys.push_back({o, key, std::move(texts)});
    }
  }
  // The command line wins: over a key it gives, over one a flag it gives excludes, and then over
  // a key that needs a dropped one (--stage-batch without the --seq-schedule the --seq dropped).
  std::set<const CLI::Option*> dropped;
  for (const Key& k : keys)
    if (given_on_command_line(command_line, *k.option) ||
        excluded_by_command_line(cmd, command_line, *k.option))
      dropped.insert(k.option);
  for (bool more = true; more;) {
    more = false;
    for (const Key& k : keys) {
      if (dropped.count(k.option)) continue;
      const std::set<CLI::Option*>& needs = k.option->get_needs();
      if (std::any_of(needs.begin(), needs.end(),
                      [&](const CLI::Option* n) { return dropped.count(n) > 0; }))
        more = dropped.insert(k.option).second;
    }
  }
  std::vector<std::string> flags;
  for (const Key& k : keys)
    if (!dropped.count(k.option))
      for (const std::string& text : k.texts) flags.push_back("--" + k.key + "=" + text);
  return flags;
}

}  // namespace

std::vector<std::string> with_run_file(const CLI::App& cmd, const std::vector<std::string>& args) {
  std::vector<std::string> rest;
  std::optional<std::string> path;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--run" && i + 1 < args.size()) {
      path = args[++i];
    } else if (args[i].rfind("--run=", 0) == 0) {
      path = args[i].substr(6);
    } else {
      rest.push_back(args[i]);
    }
  }
  if (!path) return args;  // CLI11 reports a --run without a file
  if (path->empty()) throw ConfigError("--run '': give a run file (a run's run.toml)");
  // a run's folder stands for its run.toml
  std::error_code ec;
  if (std::filesystem::is_directory(*path, ec)) {
    const std::filesystem::path inside = std::filesystem::path(*path) / kRunFile;
    if (!std::filesystem::is_regular_file(inside, ec))
      throw ConfigError(str("--run ", *path, ": a folder without ", kRunFile, "; give a run file"));
    *path = inside.string();
  } else if (std::filesystem::exists(*path, ec) && !std::filesystem::is_regular_file(*path, ec)) {
    throw ConfigError(str("--run ", *path, ": not a file"));
  }
  std::vector<std::string> out = run_file_flags(cmd, *path, rest);
  out.insert(out.end(), rest.begin(), rest.end());
  return out;
}

std::string run_file_text(const CLI::App& cmd, bool defaults) {
  std::vector<std::string> sections;
  for (const CLI::Option* o : cmd.get_options())
    if (in_run_file(*o) &&
        std::find(sections.begin(), sections.end(), o->get_group()) == sections.end())
      sections.push_back(o->get_group());
  std::string text;
  for (const std::string& section : sections) {
    std::string lines;
    for (const CLI::Option* o : cmd.get_options()) {
      if (!in_run_file(*o) || o->get_group() != section) continue;
      if (o->count() > 0)
        lines += key_of(*o) + " = " + option_value(*o) + "\n";
      else if (defaults)  // a flag not given: its default where --help shows one
        lines +=
            "# " + key_of(*o) +
            (o->get_default_str().empty() ? std::string()
                                          : " = " + toml_value(kind_of(*o), o->get_default_str())) +
            "\n";
    }
    if (!lines.empty()) text += (text.empty() ? "[" : "\n[") + section + "]\n" + lines;
  }
  return text;
}

}  // namespace memo::cli
