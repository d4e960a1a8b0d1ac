#include "chat/grammar.h"

#include <algorithm>
#include <cctype>

#include "util/error.h"

namespace sluice::chat {

namespace {
constexpr int kMaxDepth = 256;        // epsilon expansion (a repetition of something that may be empty)
constexpr size_t kMaxThreads = 4096;  // live parses kept (ambiguous grammars)
// Calls of expand() for one byte of one parse. Schemas' grammars take tens; the
// bound stops a grammar that refers to itself through alternatives (2^depth).
constexpr int64_t kMaxExpandSteps = int64_t(1) << 16;
constexpr int32_t kStringDone = 99;
bool number_can_end(int32_t st) { return st == 2 || st == 3 || st == 5 || st == 8; }

// One byte of UTF-8; st: 0 between characters, 21-23 continuation bytes left
// (st - 20), 30-33 a second byte with a narrowed range (no overlong forms,
// surrogates or code points past U+10FFFF). False for an invalid byte.
bool utf8_step(int32_t& st, unsigned char c) {
  switch (st) {
    case 0:
      if (c < 0x80) return true;
      if (c >= 0xC2 && c <= 0xDF) st = 21;
      else if (c == 0xE0) st = 30;
      else if (c == 0xED) st = 31;
      else if (c >= 0xE1 && c <= 0xEF) st = 22;
      else if (c == 0xF0) st = 32;
      else if (c >= 0xF1 && c <= 0xF3) st = 23;
      else if (c == 0xF4) st = 33;
      else return false;
      return true;
    case 21: case 22: case 23:
      if (c < 0x80 || c > 0xBF) return false;
      st = st == 21 ? 0 : st - 1;
      return true;
    case 30: if (c < 0xA0 || c > 0xBF) return false; st = 21; return true;
    case 31: if (c < 0x80 || c > 0x9F) return false; st = 21; return true;
    case 32: if (c < 0x90 || c > 0xBF) return false; st = 22; return true;
    case 33: if (c < 0x80 || c > 0x8F) return false; st = 22; return true;
    default: return false;
  }
}
}  // namespace

Grammar::Id Grammar::add(Node n) {
  nodes_.push_back(std::move(n));
  return Id(nodes_.size() - 1);
}
Grammar::Id Grammar::lit(std::string s) { return add({Kind::Lit, std::move(s), {}}); }
Grammar::Id Grammar::seq(std::vector<Id> parts) { return add({Kind::Seq, "", std::move(parts)}); }
Grammar::Id Grammar::alt(std::vector<Id> options) { return add({Kind::Alt, "", std::move(options)}); }
Grammar::Id Grammar::repeat(Id item, int64_t min, int64_t max, Id sep) {
  Node n{Kind::Repeat, "", {item}};
  n.min = min;
  n.max = max;
  n.sep = sep;
  return add(std::move(n));
}
Grammar::Id Grammar::json_string(int64_t min_chars, int64_t max_chars) {
  Node n{Kind::String, "", {}};
  n.min = min_chars;
  n.max = max_chars;
  return add(std::move(n));
}
Grammar::Id Grammar::json_number(bool integer) {
  Node n{Kind::Number, "", {}};
  n.integer = integer;
  return add(std::move(n));
}
Grammar::Id Grammar::text(int64_t max_chars, int64_t min_chars) {
  Node n{Kind::Text, "", {}};
  n.min = min_chars;
  n.max = max_chars;
  return add(std::move(n));
}
Grammar::Id Grammar::placeholder() { return add({Kind::Ref, "", {-1}}); }
void Grammar::define(Id placeholder, Id target) { nodes_[size_t(placeholder)].kids[0] = target; }

namespace {

// Which nodes can match nothing (a fixpoint: references make it circular).
std::vector<char> nullable_nodes(const std::vector<Grammar::Node>& nodes) {
  const size_t n = nodes.size();
  std::vector<char> nullable(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < n; ++i) {
      if (nullable[i]) continue;
      const Grammar::Node& d = nodes[i];
      auto null = [&](Grammar::Id k) { return k >= 0 && nullable[size_t(k)]; };
      bool v = false;
      switch (d.kind) {
        case Grammar::Kind::Lit: v = d.lit.empty(); break;
        case Grammar::Kind::Seq: v = std::all_of(d.kids.begin(), d.kids.end(), null); break;
        case Grammar::Kind::Alt: v = std::any_of(d.kids.begin(), d.kids.end(), null); break;
        case Grammar::Kind::Repeat: v = d.min == 0 || (null(d.kids[0]) && (d.min <= 1 || d.sep < 0 || null(d.sep))); break;
        case Grammar::Kind::Text: v = d.min == 0; break;
        case Grammar::Kind::Ref: v = null(d.kids[0]); break;
        case Grammar::Kind::String: case Grammar::Kind::Number: break;
      }
      if (v) nullable[i] = 1, changed = true;
    }
  }
  return nullable;
}

}  // namespace

std::vector<Grammar::Id> Grammar::left_cycle() const {
  const size_t n = nodes_.size();
  const std::vector<char> nullable = nullable_nodes(nodes_);
  // The nodes a node may begin with, before it has written a byte.
  auto left = [&](Id id) {
    std::vector<Id> out;
    const Node& d = nodes_[size_t(id)];
    switch (d.kind) {
      case Kind::Seq:
        for (Id k : d.kids) {
          out.push_back(k);
          if (!nullable[size_t(k)]) break;
        }
        break;
      case Kind::Alt: out = d.kids; break;
      case Kind::Repeat:
        out.push_back(d.kids[0]);
        if (nullable[size_t(d.kids[0])] && d.sep >= 0) out.push_back(d.sep);
        break;
      case Kind::Ref:
        if (d.kids[0] >= 0) out.push_back(d.kids[0]);
        break;
      default: break;
    }
    return out;
  };
  // Depth-first with a stack of its own: 0 unseen, 1 on the path, 2 done. Kids are taken
  // first to last (so the first alternative that closes a cycle is the one reported).
  auto firsts = [&](Id id) {
    auto v = left(id);
    std::reverse(v.begin(), v.end());
    return v;
  };
  std::vector<char> color(n, 0);
  for (size_t start = 0; start < n; ++start) {
    if (color[start]) continue;
    std::vector<std::pair<Id, std::vector<Id>>> path;
    color[start] = 1;
    path.push_back({Id(start), firsts(Id(start))});
    while (!path.empty()) {
      auto& [id, next] = path.back();
      if (next.empty()) {
        color[size_t(id)] = 2;
        path.pop_back();
        continue;
      }
      const Id k = next.back();
      next.pop_back();
      if (color[size_t(k)] == 1) {  // back to a node on the path: the cycle is k .. the top
        std::vector<Id> cycle;
        size_t from = path.size();
        while (path[from - 1].first != k) --from;
        for (size_t j = from - 1; j < path.size(); ++j) cycle.push_back(path[j].first);
        return cycle;
      }
      if (color[size_t(k)] == 0) {
        color[size_t(k)] = 1;
        path.push_back({k, firsts(k)});
      }
    }
  }
  return {};
}

GrammarCursor::GrammarCursor(std::shared_ptr<const Grammar> g) : g_(std::move(g)) {
  if (g_->root() < 0) fail("grammar has no root");
  int64_t steps = 0;
  expand(Thread{Frame{g_->root()}}, threads_, 0, steps);
}

void GrammarCursor::expand(Thread t, std::vector<Thread>& out, int depth, int64_t& steps) const {
  if (depth > kMaxDepth || out.size() >= kMaxThreads) return;
  if (++steps > kMaxExpandSteps)
    fail("grammar: the parses after one byte took more than {} steps to expand (a grammar that refers to itself "
         "through alternatives)",
         kMaxExpandSteps);
  if (t.empty()) {
    out.push_back(std::move(t));
    return;
  }
  Frame& f = t.back();
  const Grammar::Node& n = g_->node(f.node);
  auto finish = [&] {
    t.pop_back();
    expand(std::move(t), out, depth + 1, steps);
  };
  switch (n.kind) {
    case Grammar::Kind::Lit:
      if (size_t(f.i) < n.lit.size()) out.push_back(std::move(t));
      else finish();
      return;
    case Grammar::Kind::Seq:
      if (size_t(f.i) < n.kids.size()) {
        const Grammar::Id next = n.kids[size_t(f.i)];
        ++f.i;
        t.push_back(Frame{next});
        expand(std::move(t), out, depth + 1, steps);
      } else {
        finish();
      }
      return;
    case Grammar::Kind::Alt:
      if (f.i == 0) {
        for (Grammar::Id k : n.kids) {
          Thread c = t;
          c.back().i = 1;
          c.push_back(Frame{k});
          expand(std::move(c), out, depth + 1, steps);
        }
      } else {
        finish();
      }
      return;
    case Grammar::Kind::Ref:
      if (n.kids[0] < 0) fail("grammar: a reference was never defined");
      f = Frame{n.kids[0]};
      expand(std::move(t), out, depth + 1, steps);
      return;
    case Grammar::Kind::Repeat:
      expand_repeat(std::move(t), n, out, depth, steps);
      return;
    case Grammar::Kind::String:
      if (f.st == kStringDone) finish();
      else out.push_back(std::move(t));
      return;
    case Grammar::Kind::Number:
      if (number_can_end(f.st)) {
        Thread c = t;
        c.pop_back();
        expand(std::move(c), out, depth + 1, steps);
      }
      out.push_back(std::move(t));
      return;
    case Grammar::Kind::Text:
      if (f.i < n.max || f.st != 0) {
        Thread c = t;
        out.push_back(std::move(c));
      }
      if (f.st == 0 && f.i >= n.min) finish();  // never in the middle of a character
      return;
  }
}

void GrammarCursor::expand_repeat(Thread t, const Grammar::Node& n, std::vector<Thread>& out, int depth,
                                  int64_t& steps) const {
  const int64_t count = t.back().i;
  if (n.max < 0 || count < n.max) {  // one more item (after the separator)
    Thread c = t;
    ++c.back().i;
    c.push_back(Frame{n.kids[0]});
    if (count > 0 && n.sep >= 0) c.push_back(Frame{n.sep});
    expand(std::move(c), out, depth + 1, steps);
  }
  if (count >= n.min) {  // or the repetition ends here
    t.pop_back();
    expand(std::move(t), out, depth + 1, steps);
  }
}

namespace {

// One byte of a JSON string: st is its state (0 before the quote, 1 between
// characters, 2 after a backslash, 21-33 inside a UTF-8 character, 40-51 in a
// \uXXXX escape, kStringDone after the closing quote), i counts its characters
// (and holds a \uXXXX escape's value). False: the byte cannot come here.
bool json_string_step(const Grammar::Node& n, int64_t& i, int32_t& st, unsigned char c) {
  switch (st) {
    case 0:
      if (c != '"') return false;
      st = 1;
      break;
    case 1:  // between characters; i counts them (an escape is one)
      if (c == '"') {
        if (i < n.min) return false;
        st = kStringDone;
        break;
      }
      if (n.max >= 0 && i >= n.max) return false;
      ++i;
      if (c == '\\') st = 2;
      else if (c < 0x20) return false;
      else if (c < 0x80) st = 1;
      else if (int32_t u = 0; utf8_step(u, c)) st = u;  // a lead byte: utf8_step's states 21-33
      else return false;
      break;
    case 2:
      if (c == 'u') st = 40;
      else if (std::string_view("\"\\/bfnrt").find(char(c)) != std::string_view::npos) st = 1;
      else return false;
      break;
    case 21: case 22: case 23: case 30: case 31: case 32: case 33:  // inside a UTF-8 character
      if (!utf8_step(st, c)) return false;
      if (st == 0) st = 1;  // the character is complete
      break;
    case 40: case 41: case 42: case 43: {
      // \uXXXX. i: the character count in its low 32 bits, the escape's
      // value so far in bits 32-47, bit 48 set after a high surrogate.
      if (!std::isxdigit(c)) return false;
      const int64_t d = c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
      const int64_t count = i & 0xFFFFFFFF, high = i & (int64_t(1) << 48);
      const int64_t v = ((i >> 32) & 0xFFFF) * 16 + d;
      i = count | high | (v << 32);
      if (st < 43) {
        // Refuse a digit as soon as no completion of the escape can be valid
        // (the low half of a pair after a high one; never a lone low half), so
        // every accepted prefix can still be finished.
        const int shift = 4 * (43 - st);
        const int64_t lo = v << shift, hi = ((v + 1) << shift) - 1;
        const bool meets_low = lo <= 0xDFFF && hi >= 0xDC00, inside_low = lo >= 0xDC00 && hi <= 0xDFFF;
        if (high ? !meets_low : inside_low) return false;
        ++st;
      } else if (high) {  // the low half of a pair must follow a high one
        if (v < 0xDC00 || v > 0xDFFF) return false;
        i = count;
        st = 1;
      } else if (v >= 0xD800 && v <= 0xDBFF) {
        i = count | (int64_t(1) << 48);
        st = 50;
      } else if (v >= 0xDC00 && v <= 0xDFFF) {
        return false;  // a lone low surrogate
      } else {
        i = count;
        st = 1;
      }
      break;
    }
    case 50: if (c != '\\') return false; st = 51; break;
    case 51: if (c != 'u') return false; st = 40; break;
    default: return false;
  }
  return true;
}

// One byte of a JSON number: st is its state, i counts its digits. False: the byte cannot come here.
bool json_number_step(const Grammar::Node& n, int64_t& i, int32_t& st, unsigned char c) {
  // Bounded so every number reads back as what it claims: at most 18 digits
  // before any fraction (an integer fits int64) and an exponent of at most 2
  // digits, so a number is always a finite double (a 400-digit one is not).
  const bool digit = c >= '0' && c <= '9';
  const bool frac_ok = !n.integer;
  switch (st) {
    case 0: st = c == '-' ? 1 : c == '0' ? 2 : digit ? 3 : -1; break;
    case 1: st = c == '0' ? 2 : digit ? 3 : -1; break;
    case 2: st = frac_ok && c == '.' ? 4 : frac_ok && (c == 'e' || c == 'E') ? 6 : -1; break;
    case 3: st = digit ? 3 : frac_ok && c == '.' ? 4 : frac_ok && (c == 'e' || c == 'E') ? 6 : -1; break;
    case 4: st = digit ? 5 : -1; break;
    case 5: st = digit ? 5 : (c == 'e' || c == 'E') ? 6 : -1; break;
    case 6: st = (c == '+' || c == '-') ? 7 : digit ? 8 : -1; break;
    case 7: case 8: st = digit ? 8 : -1; break;
    default: st = -1;
  }
  if (st < 0) return false;
  if (st == 6) i = 0;  // i counts integer digits, then exponent digits
  if (digit && (st == 2 || st == 3 || st == 8)) {
    if (++i > (st == 8 ? 2 : 18)) return false;
  }
  return true;
}

}  // namespace

void GrammarCursor::step(const Thread& t0, unsigned char c, std::vector<Thread>& out) const {
  if (t0.empty()) return;  // accepting: nothing more may follow
  // The top frame decides; the thread is copied only where it takes the byte
  // (most bytes tried by allows() and the token mask are refused).
  Frame f = t0.back();
  const Grammar::Node& n = g_->node(f.node);
  int32_t& st = f.st;
  switch (n.kind) {
    case Grammar::Kind::Lit:
      if (static_cast<unsigned char>(n.lit[size_t(f.i)]) != c) return;
      ++f.i;
      break;
    case Grammar::Kind::Text:  // st: UTF-8 continuation state as in strings (0: between characters)
      if (st == 0) {
        if (c == '<' || f.i >= n.max) return;
        ++f.i;
      }
      if (!utf8_step(st, c)) return;
      break;
    case Grammar::Kind::String:
      if (!json_string_step(n, f.i, st, c)) return;
      break;
    case Grammar::Kind::Number:
      if (!json_number_step(n, f.i, st, c)) return;
      break;
    default:
      return;  // expand() leaves only consuming frames on top
  }
  Thread t = t0;
  t.back() = f;
  int64_t steps = 0;
  expand(std::move(t), out, 0, steps);
}

bool GrammarCursor::step_all(unsigned char c, std::vector<Thread>& next) const {
  next.clear();
  for (const auto& t : threads_) step(t, c, next);
  std::sort(next.begin(), next.end());
  next.erase(std::unique(next.begin(), next.end()), next.end());
  return !next.empty();
}

bool GrammarCursor::feed(std::string_view bytes) {
  std::vector<Thread> next;
  for (unsigned char c : bytes) {
    step_all(c, next);
    threads_.swap(next);
    if (threads_.empty()) return false;
  }
  return true;
}

bool GrammarCursor::advance_into(unsigned char c, GrammarCursor& out) const {
  if (&out == this) fail("internal: GrammarCursor::advance_into into itself");
  if (!step_all(c, out.threads_)) return false;
  out.g_ = g_;
  return true;
}

bool GrammarCursor::allows(std::string_view bytes) const {
  if (bytes.empty()) return false;
  // The first byte without copying the cursor (most candidates end there).
  GrammarCursor c(g_, Empty{});
  if (!advance_into(static_cast<unsigned char>(bytes[0]), c)) return false;
  return c.feed(bytes.substr(1));
}

bool GrammarCursor::complete() const {
  return std::any_of(threads_.begin(), threads_.end(), [](const Thread& t) { return t.empty(); });
}

bool GrammarCursor::can_continue() const {
  return std::any_of(threads_.begin(), threads_.end(), [](const Thread& t) { return !t.empty(); });
}

}  // namespace sluice::chat
