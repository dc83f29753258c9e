// A client stream's chunks, as the ps's intake units read them (next(chunk)
// returns false at the end): the tests' stand-in for a grpc::ServerReader.
#pragma once

#include <deque>
#include <functional>

template <class Chunk>
std::function<bool(Chunk&)> chunk_stream(std::deque<Chunk>& chunks) {
  return [&chunks](Chunk& c) {
    if (chunks.empty()) return false;
    c = chunks.front();
    chunks.pop_front();
    return true;
  };
}
