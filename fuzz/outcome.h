// What a fuzz target accepts as the library's answer to bad input: returning,
// or throwing an exception that names the problem. Running out of memory is
// not an answer (the input made the library trust a size it should have
// checked), so bad_alloc and length_error abort and libFuzzer keeps the
// input as a crash. ASan already stops at allocations over its limit and
// libFuzzer at -malloc_limit_mb; this catches the ones the library turns
// into exceptions itself.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <stdexcept>

namespace terngrad::fuzz {

// True when fn returned, false when it refused the input with an exception.
template <class Fn>
bool accepts(Fn&& fn) {
  try {
    fn();
    return true;
  } catch (const std::bad_alloc& e) {
    std::fprintf(stderr, "fuzz: allocation failed (an unchecked size?): %s\n", e.what());
    std::abort();
  } catch (const std::length_error& e) {
    std::fprintf(stderr, "fuzz: length_error (an unchecked size?): %s\n", e.what());
    std::abort();
  } catch (const std::exception& e) {
    return false;
  }
}

// For a call that must succeed because an earlier check accepted the same
// input (validate() then decode()): a refusal here is an inconsistency.
template <class Fn>
void must_accept(const char* what, Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: %s refused an input its validator accepted: %s\n", what, e.what());
    std::abort();
  }
}

}  // namespace terngrad::fuzz
