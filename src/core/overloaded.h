#pragma once
// The lambdas of one std::visit as one callable: std::visit(Overloaded{[](int) {}, [](auto) {}}, v).

namespace tessera {

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
// Clang before 17 deduces no aggregate's template arguments by itself.
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

}  // namespace tessera
