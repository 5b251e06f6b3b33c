#pragma once
// The machine's practical FLOP/s ceiling: the rate of a large f32 matrix multiply on all of this
// process's threads, measured for about `seconds`. MFU is reported against it.
namespace tessera::train {
double measure_matmul_ceiling(double seconds);
}  // namespace tessera::train
