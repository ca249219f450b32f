// SPDX-License-Identifier: Apache-2.0
// The process unit-s3-faults kills: it resumes a Checkpointer on an S3 root and saves step
// after step (sync and async in turn) until it is killed. Each step's state is a function of
// the step alone (s3_kill_state.hpp), so the killer can check every committed one bit-exactly.
//   s3-save-child ENDPOINT ROOT
#include "s3_kill_state.hpp"

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  auto store = std::make_shared<cairn::S3Store>("s3", "bucket", kill_test::options(argv[1]), argv[2]);
  cairn::Checkpointer ckpt({store, "run"}, kill_test::checkpointer_options());
  std::int64_t step = ckpt.latest().value_or(0);
  while (true) {
    ++step;
    if (step % 2) ckpt.save(step, kill_test::state(step));
    else ckpt.save_async(step, kill_test::state(step));
  }
}
