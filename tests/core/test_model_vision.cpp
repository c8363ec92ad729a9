// Vision towers and projectors (src/core/model_vision.cpp, docs/formulas.md#vision-language-models):
// parameter counts derived by hand from the transformers modules, and the image grids of the
// Qwen2-VL processor's smart_resize.
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "memplan/model.hpp"
#include "support/models.hpp"

using namespace memplan;

namespace {

VisionSpec qwen25_vision() {
  VisionSpec v;
  v.kind = VisionKind::kQwen25Vl;
  v.depth = 32;
  v.hidden_size = 1280;
  v.intermediate_size = 3420;
  v.num_heads = 16;
  v.patch_size = 14;
  v.temporal_patch_size = 2;
  v.spatial_merge_size = 2;
  v.window_size = 112;
  v.fullatt_blocks = {7, 15, 23, 31};
  return v;
}

VisionSpec siglip_gemma3() {
  VisionSpec v;
  v.kind = VisionKind::kSiglip;
  v.depth = 27;
  v.hidden_size = 1152;
  v.intermediate_size = 4304;
  v.num_heads = 16;
  v.patch_size = 14;
  v.image_size = 896;
  v.tokens_per_image = 256;
  return v;
}

}  // namespace

TEST_CASE("Qwen2.5-VL vision tower and merger, counted module by module") {
  // patch_embed Conv3d(3, 1280, (2, 14, 14), bias=False): 1176 x 1280 = 1,505,280.
  // A block: two RMSNorm(1280); qkv 1280x3840 + 3840; proj 1280x1280 + 1280; gate and up
  // 1280x3420 + 3420 each; down 3420x1280 + 1280 = 19,702,200. 32 blocks: 630,470,400.
  // Merger: ln_q 1280; Linear(5120, 5120) 26,219,520; Linear(5120, 3584) 18,353,664.
  const auto c = count_vision_parameters(qwen25_vision(), 3584);
  CHECK(c.tower == 1'505'280 + 630'470'400);
  CHECK(c.projector == 1'280 + 26'219'520 + 18'353'664);
  // Qwen/Qwen2.5-VL-7B-Instruct: 8,292,166,656 in all = Qwen2.5-7B's 7,615,616,512 + these.
  CHECK(7'615'616'512 + c.tower + c.projector == 8'292'166'656);
}

TEST_CASE("Qwen2-VL: LayerNorm blocks with fc1/fc2 and a LayerNorm merger") {
  VisionSpec v = qwen25_vision();
  v.kind = VisionKind::kQwen2Vl;
  v.intermediate_size = 5120;  // embed_dim x mlp_ratio 4
  v.fullatt_blocks.clear();
  // A block: two LayerNorm(1280) 5,120; qkv 4,919,040; proj 1,639,680; fc1 1280x5120 + 5120
  // 6,558,720; fc2 5120x1280 + 1280 6,554,880 = 19,677,440.
  const auto c = count_vision_parameters(v, 1536);
  CHECK(c.tower == 1'505'280 + 32 * 19'677'440);
  CHECK(c.projector == 2'560 + 26'219'520 + (5120 * 1536 + 1536));
  // Qwen/Qwen2-VL-2B-Instruct: 2,208,985,600 = Qwen2-1.5B's 1,543,714,304 + the vision part.
  CHECK(1'543'714'304 + c.tower + c.projector == 2'208'985'600);
}

TEST_CASE("Gemma 3's SigLIP tower (896 px, 27 layers) and its pooling projector") {
  // patch_embedding Conv2d(3, 1152, 14) with bias 678,528; position_embedding 4096 x 1152
  // 4,718,592; a layer: two LayerNorm 4,608, q/k/v/out 1,328,256 each, fc1 4,962,512, fc2
  // 4,959,360 = 15,239,504; post_layernorm 2,304: 416,866,032, the SiglipVisionModel total a
  // module summary of google/gemma-3-4b-it prints. Projector: mm_soft_emb_norm 1,152 plus
  // mm_input_projection_weight 1152 x 2560.
  const auto c = count_vision_parameters(siglip_gemma3(), 2560);
  CHECK(c.tower == 416'866'032);
  CHECK(c.projector == 1'152 + 1152 * 2560);
  CHECK(vision_projector_linears(siglip_gemma3(), 2560).front().nn_linear == false);
}

TEST_CASE("PEFT names of a vision block's Linears") {
  std::vector<std::string> names;
  for (const auto& l : vision_block_linears(qwen25_vision())) names.push_back(l.name);
  CHECK(names == std::vector<std::string>{"qkv", "proj", "gate_proj", "up_proj", "down_proj"});
  names.clear();
  for (const auto& l : vision_block_linears(siglip_gemma3())) names.push_back(l.name);
  CHECK(names == std::vector<std::string>{"q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2"});
}

TEST_CASE("smart_resize: sides rounded half-to-even to multiples of 28, bounded by min and max pixels") {
  const VisionSpec v = qwen25_vision();
  struct Case {
    std::int64_t h, w, rh, rw, patches, tokens;
  };
  // Expected values computed with Python's round / floor / ceil as Qwen2VLImageProcessor does.
  for (const Case& c : {Case{768, 768, 756, 756, 2916, 729}, Case{768, 1024, 756, 1036, 3996, 999},
                        Case{1080, 1920, 1092, 1932, 10764, 2691},
                        // 70 / 28 = 2.5 rounds to 2 (half to even): 56 x 56 = 3136 = min_pixels.
                        Case{70, 70, 56, 56, 16, 4},
                        // Below min_pixels: scaled up by sqrt(3136 / (20 x 20)) = 2.8, then ceil.
                        Case{20, 20, 56, 56, 16, 4},
                        // Above max_pixels 12,845,056: scaled down by sqrt(hw / max), then floor.
                        Case{3000, 6000, 2520, 5068, 65160, 16290}}) {
    const ImageGrid g = image_grid(v, c.h, c.w);
    INFO(c.h << "x" << c.w);
    CHECK(g.height == c.rh);
    CHECK(g.width == c.rw);
    CHECK(g.rows == c.rh / 14);
    CHECK(g.cols == c.rw / 14);
    CHECK(g.patches == c.patches);
    CHECK(g.tokens == c.tokens);
  }
}

TEST_CASE("Pixtral: scaled to fit longest_edge (image_size), sides rounded up to merged patches (28 px), merged 2 x 2") {
  // Mistral Small 3.1's vision_config: patch 14, image_size 1540; spatial_merge_size 2.
  VisionSpec v;
  v.kind = VisionKind::kPixtral;
  v.depth = 24;
  v.hidden_size = 1024;
  v.intermediate_size = 4096;
  v.num_heads = 16;
  v.patch_size = 14;
  v.image_size = 1540;
  v.spatial_merge_size = 2;
  struct Case {
    std::int64_t h, w, rh, rw, rows, cols, tokens;
  };
  // By hand from PixtralImageProcessor's get_resize_output_image_size with the patch_size
  // PixtralProcessor passes it (patch_size x spatial_merge_size = 28, transformers 4.50+): ratio =
  // max(h, w) / 1540, floor(h / ratio) and floor(w / ratio) when it exceeds 1, then
  // ((side - 1) // 28 + 1) units of 2 x 2 patches; tokens (features) = units down x units across.
  for (const Case& c : {Case{768, 768, 784, 784, 56, 56, 784},        // 767 // 28 + 1 = 28 units
                        Case{768, 1024, 784, 1036, 56, 74, 1036},     // 1023 // 28 + 1 = 37 units
                        Case{2000, 3080, 1008, 1540, 72, 110, 1980},  // ratio 2: 1000 x 1540
                        Case{1000, 4000, 392, 1540, 28, 110, 770},    // ratio 2.597: 385 x 1540
                        Case{20, 30, 28, 56, 2, 4, 2}}) {             // one unit down, two across
    const ImageGrid g = image_grid(v, c.h, c.w);
    INFO(c.h << "x" << c.w);
    CHECK(g.height == c.rh);
    CHECK(g.width == c.rw);
    CHECK(g.rows == c.rows);
    CHECK(g.cols == c.cols);
    CHECK(g.patches == c.rows * c.cols);
    CHECK(g.tokens == c.tokens);
  }
}

TEST_CASE("Llama 4: tiles of 336 px fitted by get_best_fit, a global tile when there are several") {
  // Llama 4 Scout / Maverick vision_config: patch 14, image_size 336, pixel_shuffle_ratio 0.5.
  VisionSpec v;
  v.kind = VisionKind::kLlama4;
  v.depth = 34;
  v.hidden_size = 1408;
  v.intermediate_size = 5632;
  v.num_heads = 16;
  v.patch_size = 14;
  v.image_size = 336;
  v.spatial_merge_size = 2;
  struct Case {
    std::int64_t h, w, tile_rows, tile_cols, tiles;
  };
  // By hand from Llama4ImageProcessorFast (max_patches 16): per grid of at most 16 tiles the scale
  // min(336 rows / h, 336 cols / w); the smallest scale >= 1, else the largest; the smallest area.
  for (const Case& c : {Case{336, 336, 1, 1, 1},     // (1, k) and (k, 1) all scale 1: (1, 1) is smallest
                        Case{100, 50, 1, 1, 1},      // every grid upscales; (1, 1) by 3.36 is the least
                        Case{768, 768, 3, 3, 10},    // 1008 / 768 = 1.3125; 2 x 2 would be 0.875
                        Case{1000, 300, 3, 1, 4},    // 1.008 (3 rows) < 1.12 (4 rows, 1 column)
                        Case{5000, 5000, 4, 4, 17}}) {  // nothing upscales: 4 x 4 shrinks least (0.2688)
    INFO(c.h << "x" << c.w);
    CHECK(llama4_tile_grid(c.h, c.w, 336) == std::pair<std::int64_t, std::int64_t>{c.tile_rows, c.tile_cols});
    const ImageGrid g = image_grid(v, c.h, c.w);
    CHECK(g.height == c.tile_rows * 336);
    CHECK(g.width == c.tile_cols * 336);
    CHECK(g.rows == c.tile_rows * 24);
    CHECK(g.cols == c.tile_cols * 24);
    CHECK(g.patches == c.tiles * 577);  // 24 x 24 patches and the class token per tile
    CHECK(g.tokens == c.tiles * 144);   // 12 x 12 after the pixel shuffle
  }
}

TEST_CASE("Gemma 3 resizes every image to 896 x 896: 4096 patches pooled to 256 tokens") {
  const ImageGrid g = image_grid(siglip_gemma3(), 480, 640);
  CHECK(g.height == 896);
  CHECK(g.width == 896);
  CHECK(g.rows == 64);
  CHECK(g.cols == 64);
  CHECK(g.patches == 4096);
  CHECK(g.tokens == 256);
}

TEST_CASE("vision_config values that cannot build a model are refused by name") {
  VisionSpec v = siglip_gemma3();
  v.tokens_per_image = 200;  // not a square
  CHECK_FALSE(validate_vision(v).has_value());
  v = siglip_gemma3();
  v.image_size = 900;  // not a multiple of the patch
  const auto s = validate_vision(v);
  REQUIRE_FALSE(s.has_value());
  CHECK(s.error().message == "model vision_config image_size = 900 must be a positive multiple of patch_size (14)");
  v = qwen25_vision();
  v.num_heads = 7;
  CHECK(validate_vision(v).error().message == "model vision_config num_heads = 7 must divide hidden_size (1280)");
  v = qwen25_vision();
  v.spatial_merge_size = 64;  // 1280 x 4096 wide merger
  CHECK_FALSE(validate_vision(v).has_value());
}

namespace {

VisionSpec mllama_vision() { return memplan::testing::llama32_11b_vision().vision; }

}  // namespace

TEST_CASE("Llama 3.2 Vision's tiled tower and projector, counted module by module") {
  // A layer: q/k/v/o 1280 x 1280 without bias 6,553,600; fc1 1280x5120 + 5120 6,558,720; fc2
  // 5120x1280 + 1280 6,554,880; two LayerNorm 5,120 = 19,672,320; the 8 global layers also carry
  // gate_attn and gate_ffn. patch_embedding Conv2d(3, 1280, 14, bias=False) 752,640;
  // class_embedding 1,280; gated positional embedding 1601 x 1280 + gate + tile_embedding
  // 9 x (4 x 1601 x 1280) = 2,049,281 + 73,774,080; pre/post-tile embeddings 9 x 5120 + gate,
  // twice 92,162; layernorm_pre/post 5,120.
  const VisionSpec v = mllama_vision();
  CHECK(v.tile_positions() == 1601);
  CHECK(v.tile_positions_padded() == 1608);
  CHECK(mllama_output_dim(v) == 7680);
  const auto c = count_vision_parameters(v, 4096);
  CHECK(c.tower == 32 * 19'672'320 + 8 * 19'672'322 + 752'640 + 1'280 + 2'049'281 + 73'774'080 + 92'162 + 5'120);
  CHECK(c.tower == 863'567'379);
  CHECK(c.projector == 7680 * 4096 + 4096);  // multi_modal_projector, with bias: 31,461,376
  CHECK(count_vision_parameters(v, 8192).projector == 62'922'752);
  CHECK(count_parameters(memplan::testing::llama32_11b_vision()).total == 10'670'220'835);  // the whole model
  std::vector<std::string> names;
  for (const auto& l : vision_block_linears(v)) names.push_back(l.name + (l.bias ? "+b" : ""));
  CHECK(names == std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj", "fc1+b", "fc2+b"});
}

TEST_CASE("mllama images: always max_num_tiles tiles through the tower, one <|image|> token in the text") {
  const VisionSpec v = mllama_vision();
  CHECK(default_image_side(v) == 560);
  for (const auto& [h, w] : std::vector<std::pair<std::int64_t, std::int64_t>>{{560, 560}, {853, 1280}, {300, 3000}}) {
    const ImageGrid g = image_grid(v, h, w);
    CHECK(g.patches == 4 * 1608);  // pack_images gives every image 4 tiles; each padded to 1608 positions
    CHECK(g.tokens == 1);
  }
}

TEST_CASE("mllama vision_config values that cannot build the tower are refused") {
  VisionSpec v = mllama_vision();
  v.intermediate_layers = {3, 32};
  CHECK_FALSE(validate_vision(v).has_value());
  v = mllama_vision();
  v.image_size = 561;
  CHECK_FALSE(validate_vision(v).has_value());
  v = mllama_vision();
  v.max_num_tiles = 0;
  CHECK_FALSE(validate_vision(v).has_value());
  CHECK(validate_vision(mllama_vision()).has_value());
}
