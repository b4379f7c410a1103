#define DOCTEST_CONFIG_IMPLEMENT
#include "doctest_torch.hpp"

#include "embcache/h5/process_settings.hpp"

int main(int argc, char** argv) {
  embcache::tune_process();
  doctest::Context context(argc, argv);
  return context.run();
}
