// Tokens and syntax tree of the Jinja subset (internal to text/jinja/).
#pragma once
#include <memory>
#include <string>
#include <vector>

namespace sluice::text::jinja {

enum class Tok {
  Text, Number, String, Ident, Equals, LParen, RParen, OpenStmt, CloseStmt, OpenExpr, CloseExpr,
  LBracket, RBracket, LBrace, RBrace, Comma, Dot, Colon, Pipe, Add, Mul, Pow, Cmp, Unary, Comment
};

struct Token {
  Tok type;
  std::string value;
  int line;  // 1-based line in the template source
};

// Lexes a template (after Jinja's trailing-newline, lstrip_blocks and
// trim_blocks preprocessing, as transformers configures it).
std::vector<Token> lex(const std::string& source);

enum class Node {
  Text, Output, If, For, Set, Macro, CallBlock, FilterBlock, Break, Continue,
  Int, Float, Str, Ident, Array, Tuple, ObjectLit, Member, Slice, Call, KwArg, Spread, KwSpread,
  Binary, Unary, Filter, Test, Ternary, Select
};

struct Ast {
  Node kind;
  int line = 0;
  std::string str;        // text, identifier, string literal, operator, filter/test name
  double num = 0;         // numeric literals
  bool flag = false;      // Member: computed; Test: negated
  std::vector<std::unique_ptr<Ast>> kids;   // operands / items / args
  std::vector<std::unique_ptr<Ast>> body;   // statement bodies
  std::vector<std::unique_ptr<Ast>> alt;    // else branches
  std::vector<std::unique_ptr<Ast>> params; // macro / caller parameters
};
using AstPtr = std::unique_ptr<Ast>;

std::vector<AstPtr> parse(const std::vector<Token>& tokens);

}  // namespace sluice::text::jinja
