#include "text/jinja/ast.h"
#include "util/error.h"

namespace sluice::text::jinja {

namespace {

class Parser {
 public:
  explicit Parser(const std::vector<Token>& t) : t_(t) {}

  std::vector<AstPtr> program() {
    std::vector<AstPtr> out;
    while (pos_ < t_.size()) add(out, any());
    return out;
  }

 private:
  [[noreturn]] void error(const std::string& what) const {
    int line = pos_ < t_.size() ? t_[pos_].line : (t_.empty() ? 1 : t_.back().line);
    fail("template line {}: {}", line, what);
  }
  const Token& peek(size_t k = 0) const {
    if (pos_ + k >= t_.size()) error("unexpected end of template");
    return t_[pos_ + k];
  }
  bool is(Tok type, size_t k = 0) const { return pos_ + k < t_.size() && t_[pos_ + k].type == type; }
  bool is_ident(const char* name, size_t k = 0) const {
    return pos_ + k < t_.size() && t_[pos_ + k].type == Tok::Ident && t_[pos_ + k].value == name;
  }
  bool is_stmt(std::initializer_list<const char*> names) const {
    if (!is(Tok::OpenStmt) || !is(Tok::Ident, 1)) return false;
    for (const char* n : names)
      if (t_[pos_ + 1].value == n) return true;
    return false;
  }
  const Token& expect(Tok type, const char* what) {
    if (!is(type)) error(std::string("expected ") + what + (pos_ < t_.size() ? ", got '" + t_[pos_].value + "'" : ""));
    return t_[pos_++];
  }
  void expect_ident(const char* name) {
    if (!is_ident(name)) error(std::string("expected '") + name + "'");
    ++pos_;
  }
  AstPtr node(Node k, int line) {
    auto a = std::make_unique<Ast>();
    a->kind = k;
    a->line = line;
    return a;
  }
  static void add(std::vector<AstPtr>& v, AstPtr a) {
    if (a) v.push_back(std::move(a));
  }
  void body_until(std::vector<AstPtr>& out, std::initializer_list<const char*> ends, const char* opener, int line) {
    while (!is_stmt(ends)) {
      if (pos_ >= t_.size()) fail("template line {}: '{}' block is not closed", line, opener);
      add(out, any());
    }
  }

  AstPtr any() {
    Depth d(*this);
    const Token& tk = peek();
    switch (tk.type) {
      case Tok::Comment: ++pos_; return nullptr;
      case Tok::Text: {
        auto a = node(Node::Text, tk.line);
        a->str = tk.value;
        ++pos_;
        return a;
      }
      case Tok::OpenStmt: return statement();
      case Tok::OpenExpr: {
        ++pos_;
        auto a = node(Node::Output, tk.line);
        a->kids.push_back(expression());
        expect(Tok::CloseExpr, "'}}'");
        return a;
      }
      default: error("unexpected '" + tk.value + "'");
    }
  }

  AstPtr statement() {
    expect(Tok::OpenStmt, "'{%'");
    if (!is(Tok::Ident)) error("expected a statement name");
    const Token& nt = t_[pos_++];
    const std::string& name = nt.value;
    const int line = nt.line;
    if (name == "set") {
      auto a = node(Node::Set, line);
      a->kids.push_back(sequence(false));
      if (is(Tok::Equals)) {
        ++pos_;
        a->kids.push_back(sequence(false));
      } else {
        expect(Tok::CloseStmt, "'%}'");
        body_until(a->body, {"endset"}, "set", line);
        pos_ += 2;
      }
      expect(Tok::CloseStmt, "'%}'");
      return a;
    }
    if (name == "if") {
      auto a = if_rest(line);
      expect(Tok::OpenStmt, "'{%'");
      expect_ident("endif");
      expect(Tok::CloseStmt, "'%}'");
      return a;
    }
    if (name == "for") return for_statement(line);
    if (name == "macro") {
      auto a = node(Node::Macro, line);
      auto nm = primary();
      if (nm->kind != Node::Ident) error("expected a macro name");
      a->str = nm->str;
      a->params = args(true);
      expect(Tok::CloseStmt, "'%}'");
      body_until(a->body, {"endmacro"}, "macro", line);
      pos_ += 2;
      expect(Tok::CloseStmt, "'%}'");
      return a;
    }
    if (name == "call") return call_statement(line);
    if (name == "filter") {
      auto a = node(Node::FilterBlock, line);
      auto f = primary();
      if (f->kind != Node::Ident) error("expected a filter name");
      if (is(Tok::LParen)) f = call_rest(std::move(f));
      a->kids.push_back(std::move(f));
      expect(Tok::CloseStmt, "'%}'");
      body_until(a->body, {"endfilter"}, "filter", line);
      pos_ += 2;
      expect(Tok::CloseStmt, "'%}'");
      return a;
    }
    if (name == "break" || name == "continue") {
      expect(Tok::CloseStmt, "'%}'");
      return node(name == "break" ? Node::Break : Node::Continue, line);
    }
    fail("template line {}: unsupported statement '{}'", line, name);
  }

  // {% for VAR in EXPR %}...[{% else %}...]{% endfor %}, after 'for'.
  AstPtr for_statement(int line) {
    auto a = node(Node::For, line);
    auto var = sequence(true);
    if (var->kind != Node::Ident && var->kind != Node::Tuple) error("expected a loop variable or tuple");
    a->kids.push_back(std::move(var));
    expect_ident("in");
    a->kids.push_back(expression());
    expect(Tok::CloseStmt, "'%}'");
    body_until(a->body, {"endfor", "else"}, "for", line);
    if (is_stmt({"else"})) {
      pos_ += 2;
      expect(Tok::CloseStmt, "'%}'");
      body_until(a->alt, {"endfor"}, "for", line);
    }
    expect(Tok::OpenStmt, "'{%'");
    expect_ident("endfor");
    expect(Tok::CloseStmt, "'%}'");
    return a;
  }

  // {% call[(PARAMS)] MACRO(ARGS) %}...{% endcall %}, after 'call'.
  AstPtr call_statement(int line) {
    auto a = node(Node::CallBlock, line);
    if (is(Tok::LParen)) a->params = args(true);
    auto callee = primary();
    if (callee->kind != Node::Ident) error("expected a macro name after 'call'");
    auto call = node(Node::Call, line);
    call->kids.push_back(std::move(callee));
    for (auto& x : args(false)) call->kids.push_back(std::move(x));
    a->kids.push_back(std::move(call));
    expect(Tok::CloseStmt, "'%}'");
    body_until(a->body, {"endcall"}, "call", line);
    pos_ += 2;
    expect(Tok::CloseStmt, "'%}'");
    return a;
  }

  AstPtr if_rest(int line) {
    auto a = node(Node::If, line);
    a->kids.push_back(expression());
    expect(Tok::CloseStmt, "'%}'");
    body_until(a->body, {"elif", "else", "endif"}, "if", line);
    if (is_stmt({"elif"})) {
      int l2 = t_[pos_ + 1].line;
      pos_ += 2;
      a->alt.push_back(if_rest(l2));
    } else if (is_stmt({"else"})) {
      pos_ += 2;
      expect(Tok::CloseStmt, "'%}'");
      body_until(a->alt, {"endif"}, "if", line);
    }
    return a;
  }

  AstPtr sequence(bool primary_only) {
    int line = peek().line;
    std::vector<AstPtr> items;
    items.push_back(primary_only ? primary() : expression());
    bool tuple = is(Tok::Comma);
    while (tuple) {
      ++pos_;
      items.push_back(primary_only ? primary() : expression());
      if (!is(Tok::Comma)) break;
    }
    if (!tuple) return std::move(items[0]);
    auto t = node(Node::Tuple, line);
    t->kids = std::move(items);
    return t;
  }

  // Nesting limit keeps hostile templates from exhausting the stack.
  struct Depth {
    Parser& p;
    explicit Depth(Parser& q) : p(q) {
      if (++p.depth_ > 256) p.error("expression or block nesting too deep");
    }
    ~Depth() { --p.depth_; }
  };
  AstPtr expression() {
    Depth d(*this);
    return ternary();
  }

  AstPtr ternary() {
    auto a = logic_or();
    if (is_ident("if")) {
      int line = t_[pos_].line;
      ++pos_;
      auto test = logic_or();
      if (is_ident("else")) {
        ++pos_;
        auto f = ternary();
        auto n = node(Node::Ternary, line);
        n->kids.push_back(std::move(test));
        n->kids.push_back(std::move(a));
        n->kids.push_back(std::move(f));
        return n;
      }
      auto n = node(Node::Select, line);
      n->kids.push_back(std::move(a));
      n->kids.push_back(std::move(test));
      return n;
    }
    return a;
  }
  AstPtr binary(AstPtr l, const std::string& op, AstPtr r, int line) {
    auto n = node(Node::Binary, line);
    n->str = op;
    n->kids.push_back(std::move(l));
    n->kids.push_back(std::move(r));
    return n;
  }
  AstPtr logic_or() {
    auto l = logic_and();
    while (is_ident("or")) {
      int line = t_[pos_++].line;
      l = binary(std::move(l), "or", logic_and(), line);
    }
    return l;
  }
  AstPtr logic_and() {
    auto l = logic_not();
    while (is_ident("and")) {
      int line = t_[pos_++].line;
      l = binary(std::move(l), "and", logic_not(), line);
    }
    return l;
  }
  AstPtr logic_not() {
    Depth d(*this);
    if (is_ident("not")) {
      int line = t_[pos_++].line;
      auto n = node(Node::Unary, line);
      n->str = "not";
      n->kids.push_back(logic_not());
      return n;
    }
    return comparison();
  }
  AstPtr comparison() {
    auto l = additive();
    while (true) {
      std::string op;
      int line = pos_ < t_.size() ? t_[pos_].line : 0;
      if (is_ident("not") && is_ident("in", 1)) {
        op = "not in";
        pos_ += 2;
      } else if (is_ident("in")) {
        op = "in";
        ++pos_;
      } else if (is(Tok::Cmp)) {
        op = t_[pos_++].value;
      } else {
        break;
      }
      l = binary(std::move(l), op, additive(), line);
    }
    return l;
  }
  AstPtr additive() {
    auto l = multiplicative();
    while (is(Tok::Add)) {
      const Token& o = t_[pos_++];
      l = binary(std::move(l), o.value, multiplicative(), o.line);
    }
    return l;
  }
  AstPtr multiplicative() {
    auto l = power();
    while (is(Tok::Mul)) {
      const Token& o = t_[pos_++];
      l = binary(std::move(l), o.value, power(), o.line);
    }
    return l;
  }
  AstPtr power() {
    auto l = test();
    while (is(Tok::Pow)) {
      const Token& o = t_[pos_++];
      l = binary(std::move(l), o.value, test(), o.line);
    }
    return l;
  }
  AstPtr test() {
    auto l = filter();
    while (is_ident("is")) {
      int line = t_[pos_++].line;
      bool neg = is_ident("not");
      if (neg) ++pos_;
      if (!is(Tok::Ident)) error("expected a test name after 'is'");
      auto n = node(Node::Test, line);
      n->str = t_[pos_++].value;
      n->flag = neg;
      n->kids.push_back(std::move(l));
      l = std::move(n);
    }
    return l;
  }
  AstPtr filter() {
    auto l = unary_sign();
    while (is(Tok::Pipe)) {
      int line = t_[pos_++].line;
      auto f = primary();
      if (f->kind != Node::Ident) error("expected a filter name after '|'");
      auto n = node(Node::Filter, line);
      n->str = f->str;
      n->kids.push_back(std::move(l));
      if (is(Tok::LParen))
        for (auto& a : args(false)) n->params.push_back(std::move(a));
      l = std::move(n);
    }
    return l;
  }
  AstPtr unary_sign() {
    Depth d(*this);
    if ((is(Tok::Unary) || is(Tok::Add)) && (t_[pos_].value == "-" || t_[pos_].value == "+")) {
      const Token& o = t_[pos_++];
      auto n = node(Node::Unary, o.line);
      n->str = o.value;
      n->kids.push_back(unary_sign());
      return n;
    }
    auto m = member(primary());
    if (is(Tok::LParen)) return call_rest(std::move(m));
    return m;
  }
  AstPtr call_rest(AstPtr callee) {
    auto n = node(Node::Call, callee->line);
    n->kids.push_back(std::move(callee));
    for (auto& a : args(false)) n->kids.push_back(std::move(a));
    AstPtr e = member(std::move(n));
    if (is(Tok::LParen)) e = call_rest(std::move(e));
    return e;
  }
  std::vector<AstPtr> args(bool parameters) {
    expect(Tok::LParen, "'('");
    std::vector<AstPtr> out;
    while (!is(Tok::RParen)) {
      if (pos_ >= t_.size()) error("unterminated argument list");
      int line = t_[pos_].line;
      if (!parameters && is(Tok::Pow)) {
        ++pos_;
        auto n = node(Node::KwSpread, line);
        n->kids.push_back(expression());
        out.push_back(std::move(n));
      } else if (!parameters && is(Tok::Mul) && t_[pos_].value == "*") {
        ++pos_;
        auto n = node(Node::Spread, line);
        n->kids.push_back(expression());
        out.push_back(std::move(n));
      } else {
        auto a = expression();
        if (is(Tok::Equals)) {
          ++pos_;
          if (a->kind != Node::Ident) error("expected an identifier before '='");
          auto kw = node(Node::KwArg, line);
          kw->str = a->str;
          kw->kids.push_back(expression());
          a = std::move(kw);
        }
        if (parameters && a->kind != Node::Ident && a->kind != Node::KwArg)
          error("expected a parameter name");
        out.push_back(std::move(a));
      }
      if (is(Tok::Comma)) ++pos_;
    }
    ++pos_;
    return out;
  }
  AstPtr member(AstPtr obj) {
    while (is(Tok::Dot) || is(Tok::LBracket)) {
      const Token& o = t_[pos_++];
      auto n = node(Node::Member, o.line);
      n->kids.push_back(std::move(obj));
      if (o.type == Tok::LBracket) {
        n->flag = true;
        std::vector<AstPtr> parts;
        bool slice = false;
        while (!is(Tok::RBracket)) {
          if (pos_ >= t_.size()) error("unterminated '['");
          if (is(Tok::Colon)) {
            parts.push_back(nullptr);
            ++pos_;
            slice = true;
          } else {
            parts.push_back(expression());
            if (is(Tok::Colon)) {
              ++pos_;
              slice = true;
            }
          }
        }
        if (parts.empty()) error("expected an index or slice inside '[]'");
        if (slice) {
          if (parts.size() > 3) error("a slice takes at most 3 parts");
          auto s = node(Node::Slice, o.line);
          parts.resize(3);
          s->kids = std::move(parts);
          n->kids.push_back(std::move(s));
        } else {
          n->kids.push_back(std::move(parts[0]));
        }
        expect(Tok::RBracket, "']'");
      } else {
        auto p = primary();
        if (p->kind != Node::Ident && p->kind != Node::Int) error("expected a name after '.'");
        n->kids.push_back(std::move(p));
      }
      obj = std::move(n);
    }
    return obj;
  }
  AstPtr primary() {
    const Token& tk = peek();
    ++pos_;
    switch (tk.type) {
      case Tok::Number: {
        bool is_float = tk.value.find('.') != std::string::npos;
        auto n = node(is_float ? Node::Float : Node::Int, tk.line);
        n->num = std::stod(tk.value);
        // Integer literals travel as a double into the interpreter's int64: one past 2^53 could
        // round, one past 2^63 would overflow the cast, so both are errors, not wrapped values.
        if (!is_float && !(n->num <= 9007199254740992.0))
          error("integer literal " + tk.value + " is larger than 2^53");
        return n;
      }
      case Tok::String: {
        auto n = node(Node::Str, tk.line);
        n->str = tk.value;
        while (is(Tok::String)) n->str += t_[pos_++].value;
        return n;
      }
      case Tok::Ident: {
        auto n = node(Node::Ident, tk.line);
        n->str = tk.value;
        return n;
      }
      case Tok::LParen: {
        auto e = sequence(false);
        expect(Tok::RParen, "')'");
        return e;
      }
      case Tok::LBracket: {
        auto n = node(Node::Array, tk.line);
        while (!is(Tok::RBracket)) {
          if (pos_ >= t_.size()) error("unterminated '['");
          n->kids.push_back(expression());
          if (is(Tok::Comma)) ++pos_;
        }
        ++pos_;
        return n;
      }
      case Tok::LBrace: {
        auto n = node(Node::ObjectLit, tk.line);
        while (!is(Tok::RBrace)) {
          if (pos_ >= t_.size()) error("unterminated '{'");
          n->kids.push_back(expression());
          expect(Tok::Colon, "':' in object literal");
          n->kids.push_back(expression());
          if (is(Tok::Comma)) ++pos_;
        }
        ++pos_;
        return n;
      }
      default: --pos_; error("unexpected '" + tk.value + "'");
    }
  }

  const std::vector<Token>& t_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

std::vector<AstPtr> parse(const std::vector<Token>& tokens) { return Parser(tokens).program(); }

}  // namespace sluice::text::jinja
