#include <gtest/gtest.h>

#include "core/tensor.h"

using namespace tessera;

TEST(Tensor, ViewsShareStorage) {
  MemoryAccountant acc;
  Tensor t = Tensor::zeros({2, 3, 4}, DType::F32, MemoryTag::Workspace, acc);
  EXPECT_EQ(acc.stats().live_of(MemoryTag::Workspace), 2u * 3 * 4 * 4);
  float* p = t.data<float>();
  for (int i = 0; i < 24; ++i) p[i] = static_cast<float>(i);

  Tensor s = t.slice(1, 1, 3);  // [2, 2, 4]
  EXPECT_EQ(s.shape(), (Shape{2, 2, 4}));
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_EQ(s.data<float>()[0], 4.0f);

  Tensor tr = t.transpose(1, 2);  // [2, 4, 3]
  Tensor c = tr.contiguous(acc, MemoryTag::Workspace);
  // c[b][i][j] = t[b][j][i]
  EXPECT_EQ(c.data<float>()[1], p[4]);
  EXPECT_EQ(c.data<float>()[3], p[1]);

  Tensor r = t.reshape({6, 4});
  r.data<float>()[5] = 100.0f;
  EXPECT_EQ(p[5], 100.0f);  // reshape is a view
  EXPECT_EQ(acc.stats().live_of(MemoryTag::Workspace), 2u * (2 * 3 * 4 * 4));
}

TEST(Tensor, StorageIsFreedWithTheLastView) {
  MemoryAccountant acc;
  Tensor view;
  {
    Tensor t = Tensor::empty({1000}, DType::BF16, MemoryTag::Activations, acc);
    view = t.slice(0, 10, 20);
  }
  EXPECT_EQ(acc.stats().live_of(MemoryTag::Activations), 2000u);
  view = Tensor();
  EXPECT_EQ(acc.stats().live_of(MemoryTag::Activations), 0u);
}

TEST(Tensor, ClearErrors) {
  MemoryAccountant acc;
  Tensor t = Tensor::empty({4, 6}, DType::F32, MemoryTag::Workspace, acc);
  EXPECT_THROW(t.reshape({5, 5}), Error);
  EXPECT_THROW(t.transpose(0, 1).reshape({24}), Error);
  EXPECT_THROW(t.slice(0, 2, 5), Error);
  EXPECT_THROW(t.data<int32_t>(), Error);
  // An empty shape whose strides would not fit 64 bits.
  EXPECT_THROW(Tensor::empty({0, int64_t{1} << 62, int64_t{1} << 62}, DType::F32, MemoryTag::Workspace, acc), Error);
  EXPECT_NO_THROW(Tensor::empty({0, int64_t{1} << 62}, DType::F32, MemoryTag::Workspace, acc));
  try {
    t.expect_shape({4, 7}, "attention input");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shape mismatch for attention input: expected [4, 7], got [4, 6]"),
              std::string::npos)
        << e.what();
  }
}
