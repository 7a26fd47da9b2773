// Unit tests for the image group's kernel (src/ops/image.cpp): ImageDecoder on small images
// of every supported format (encoded here with the same codec libraries, or built by hand for
// BMP/PNM), and corrupt / truncated inputs, which must give a basalt::Error, never a crash.
#include "op_tester.hpp"

#include <basalt/error.hpp>
#include <gtest/gtest.h>

#include <cstdio>  // before jpeglib.h

#include <jpeglib.h>
#include <openjpeg-2.5/openjpeg.h>
#include <png.h>
#include <tiffio.h>
#include <webp/encode.h>

#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <unistd.h>
#include <string>
#include <vector>

using namespace basalt;
using namespace basalt::test;

namespace {

using Bytes = std::vector<uint8_t>;

const int W = 13, H = 7;

// RGB test pattern.
Bytes image_pattern() {
  Bytes p(size_t(W * H * 3));
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) {
      uint8_t* o = &p[size_t((y * W + x) * 3)];
      o[0] = uint8_t(x * 19 + y * 3);
      o[1] = uint8_t(y * 36 + 10);
      o[2] = uint8_t(255 - x * 7 - y * 11);
    }
  return p;
}

Tensor image_decode(const Bytes& data, const std::string& fmt = "RGB") {
  Tensor in = make_tensor<uint8_t>({int64_t(data.size())}, std::vector<uint8_t>(data.begin(), data.end()));
  return run_op("ImageDecoder", 20, {in}, {attr("pixel_format", fmt)})[0].tensor;
}

// ---- encoders (test-only) ----

Bytes encode_png(const Bytes& rgb) {
  Bytes out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return {};
  }
  png_set_write_fn(
      png, &out, [](png_structp p, png_bytep d, png_size_t n) {
        auto* o = static_cast<Bytes*>(png_get_io_ptr(p));
        o->insert(o->end(), d, d + n);
      },
      nullptr);
  png_set_IHDR(png, info, W, H, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < H; ++y) png_write_row(png, const_cast<uint8_t*>(&rgb[size_t(y * W * 3)]));
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

Bytes encode_jpeg(const Bytes& rgb) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* mem = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &mem, &size);
  c.image_width = W;
  c.image_height = H;
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 100, TRUE);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(&rgb[size_t(c.next_scanline) * W * 3]);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  Bytes out(mem, mem + size);
  jpeg_destroy_compress(&c);
  std::free(mem);
  return out;
}

Bytes encode_webp(const Bytes& rgb) {
  uint8_t* out = nullptr;
  size_t n = WebPEncodeLosslessRGB(rgb.data(), W, H, W * 3, &out);
  Bytes b(out, out + n);
  WebPFree(out);
  return b;
}

Bytes encode_tiff(const Bytes& rgb) {
  char path[] = "/tmp/basalt_image_test_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return {};
  close(fd);
  TIFF* t = TIFFOpen(path, "w");
  TIFFSetField(t, TIFFTAG_IMAGEWIDTH, uint32_t(W));
  TIFFSetField(t, TIFFTAG_IMAGELENGTH, uint32_t(H));
  TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, 3);
  TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, 8);
  TIFFSetField(t, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_RGB);
  TIFFSetField(t, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
  TIFFSetField(t, TIFFTAG_COMPRESSION, COMPRESSION_LZW);
  TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, 2);
  for (int y = 0; y < H; ++y) TIFFWriteScanline(t, const_cast<uint8_t*>(&rgb[size_t(y * W * 3)]), uint32_t(y), 0);
  TIFFClose(t);
  Bytes out;
  if (FILE* f = std::fopen(path, "rb")) {
    int ch;
    while ((ch = std::fgetc(f)) != EOF) out.push_back(uint8_t(ch));
    std::fclose(f);
  }
  std::remove(path);
  return out;
}

Bytes encode_j2k(const Bytes& rgb, bool jp2) {
  opj_cparameters_t p;
  opj_set_default_encoder_parameters(&p);  // lossless (reversible 5/3) by default
  p.numresolution = 2;
  opj_image_cmptparm_t cp[3];
  std::memset(cp, 0, sizeof cp);
  for (auto& c : cp) c.dx = c.dy = 1, c.w = W, c.h = H, c.prec = 8, c.sgnd = 0;
  opj_image_t* im = opj_image_create(3, cp, OPJ_CLRSPC_SRGB);
  im->x0 = im->y0 = 0;
  im->x1 = W;
  im->y1 = H;
  for (int k = 0; k < 3; ++k)
    for (int i = 0; i < W * H; ++i) im->comps[k].data[i] = rgb[size_t(i * 3 + k)];
  opj_codec_t* codec = opj_create_compress(jp2 ? OPJ_CODEC_JP2 : OPJ_CODEC_J2K);
  opj_setup_encoder(codec, &p, im);
  struct Sink {
    Bytes b;
    size_t pos = 0;
  } sink;
  opj_stream_t* s = opj_stream_default_create(OPJ_FALSE);
  opj_stream_set_user_data(s, &sink, nullptr);
  opj_stream_set_write_function(s, [](void* buf, OPJ_SIZE_T n, void* ud) -> OPJ_SIZE_T {
    auto* k = static_cast<Sink*>(ud);
    if (k->pos + n > k->b.size()) k->b.resize(k->pos + n);
    std::memcpy(k->b.data() + k->pos, buf, n);
    k->pos += n;
    return n;
  });
  opj_stream_set_skip_function(s, [](OPJ_OFF_T n, void* ud) -> OPJ_OFF_T {
    auto* k = static_cast<Sink*>(ud);
    k->pos += size_t(n);
    if (k->pos > k->b.size()) k->b.resize(k->pos);
    return n;
  });
  opj_stream_set_seek_function(s, [](OPJ_OFF_T n, void* ud) -> OPJ_BOOL {
    auto* k = static_cast<Sink*>(ud);
    k->pos = size_t(n);
    if (k->pos > k->b.size()) k->b.resize(k->pos);
    return OPJ_TRUE;
  });
  bool ok = opj_start_compress(codec, im, s) && opj_encode(codec, s) && opj_end_compress(codec, s);
  opj_stream_destroy(s);
  opj_destroy_codec(codec);
  opj_image_destroy(im);
  return ok ? sink.b : Bytes{};
}

void put16(Bytes& b, uint32_t v) { b.push_back(uint8_t(v)), b.push_back(uint8_t(v >> 8)); }
void put32(Bytes& b, uint32_t v) { put16(b, v & 0xFFFF), put16(b, v >> 16); }

// BMP with a 40-byte info header. bpp 24 (bottom-up) or 32 (top-down), from the pattern.
Bytes encode_bmp(const Bytes& rgb, int bpp) {
  size_t stride = ((size_t(W) * size_t(bpp) + 31) / 32) * 4;
  Bytes b{'B', 'M'};
  put32(b, uint32_t(54 + stride * H));
  put32(b, 0);
  put32(b, 54);
  put32(b, 40);
  put32(b, W);
  put32(b, uint32_t(bpp == 32 ? -H : H));
  put16(b, 1);
  put16(b, uint16_t(bpp));
  put32(b, 0);
  put32(b, uint32_t(stride * H));
  put32(b, 2835), put32(b, 2835), put32(b, 0), put32(b, 0);
  for (int r = 0; r < H; ++r) {
    int y = bpp == 32 ? r : H - 1 - r;
    size_t start = b.size();
    for (int x = 0; x < W; ++x) {
      const uint8_t* p = &rgb[size_t((y * W + x) * 3)];
      b.push_back(p[2]), b.push_back(p[1]), b.push_back(p[0]);
      if (bpp == 32) b.push_back(0);
    }
    while (b.size() - start < stride) b.push_back(0);
  }
  return b;
}

// 8-bit palette BMP (4 colors) with RLE8 or uncompressed data; pixel (x, y) has index (x + y) % 4.
Bytes encode_bmp8(bool rle) {
  Bytes data;
  if (rle) {
    for (int r = 0; r < H; ++r) {
      int y = H - 1 - r;
      for (int x = 0; x < W; ++x) data.push_back(1), data.push_back(uint8_t((x + y) % 4));
      data.push_back(0), data.push_back(0);  // end of line
    }
    data.push_back(0), data.push_back(1);  // end of bitmap
  } else {
    for (int r = 0; r < H; ++r) {
      int y = H - 1 - r;
      for (int x = 0; x < 16; ++x) data.push_back(x < W ? uint8_t((x + y) % 4) : 0);
    }
  }
  Bytes b{'B', 'M'};
  put32(b, uint32_t(14 + 40 + 16 + data.size()));
  put32(b, 0);
  put32(b, 14 + 40 + 16);
  put32(b, 40), put32(b, W), put32(b, H);
  put16(b, 1), put16(b, 8);
  put32(b, rle ? 1 : 0), put32(b, uint32_t(data.size()));
  put32(b, 0), put32(b, 0), put32(b, 4), put32(b, 0);
  const uint8_t pal[4][3] = {{0, 0, 0}, {255, 0, 0}, {0, 255, 0}, {10, 20, 30}};  // RGB
  for (auto& c : pal) b.push_back(c[2]), b.push_back(c[1]), b.push_back(c[0]), b.push_back(0);
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

Bytes encode_pnm(const Bytes& rgb, char kind) {
  std::string hdr = std::string("P") + kind + "\n# comment\n" + std::to_string(W) + " " + std::to_string(H) + "\n255\n";
  Bytes b(hdr.begin(), hdr.end());
  if (kind == '6') {
    b.insert(b.end(), rgb.begin(), rgb.end());
  } else if (kind == '3') {
    std::string s;
    for (uint8_t v : rgb) s += std::to_string(v) + " ";
    b.insert(b.end(), s.begin(), s.end());
  }
  return b;
}

std::vector<std::pair<std::string, Bytes>> all_formats() {
  Bytes rgb = image_pattern();
  return {{"png", encode_png(rgb)},      {"jpeg", encode_jpeg(rgb)},        {"webp", encode_webp(rgb)},
          {"tiff", encode_tiff(rgb)},    {"j2k", encode_j2k(rgb, false)},   {"jp2", encode_j2k(rgb, true)},
          {"bmp24", encode_bmp(rgb, 24)}, {"bmp32", encode_bmp(rgb, 32)},   {"bmp8rle", encode_bmp8(true)},
          {"bmp8", encode_bmp8(false)},  {"ppm", encode_pnm(rgb, '6')},     {"ppm_ascii", encode_pnm(rgb, '3')}};
}

bool is_lossless(const std::string& name) { return name != "jpeg" && name.rfind("bmp8", 0) != 0; }

}  // namespace

TEST(ImageDecoder, DecodesEveryFormat) {
  Bytes rgb = image_pattern();
  for (auto& [name, data] : all_formats()) {
    SCOPED_TRACE(name);
    ASSERT_FALSE(data.empty());
    Tensor t = image_decode(data);
    ASSERT_EQ(t.dtype(), DType::Uint8);
    ASSERT_EQ(t.shape(), (Shape{H, W, 3}));
    const uint8_t* p = t.data<uint8_t>();
    if (is_lossless(name)) {
      for (size_t i = 0; i < rgb.size(); ++i) ASSERT_EQ(int(p[i]), int(rgb[i])) << "at " << i;
    } else if (name == "jpeg") {
      int maxd = 0;
      for (size_t i = 0; i < rgb.size(); ++i) maxd = std::max(maxd, std::abs(int(p[i]) - int(rgb[i])));
      EXPECT_LE(maxd, 40);  // 4:2:0 chroma subsampling of a colorful pattern
    }
    Tensor bgr = image_decode(data, "BGR");
    ASSERT_EQ(bgr.shape(), (Shape{H, W, 3}));
    for (int64_t i = 0; i < H * W; ++i)
      for (int k = 0; k < 3; ++k) ASSERT_EQ(bgr.data<uint8_t>()[i * 3 + k], p[i * 3 + 2 - k]);
    Tensor g = image_decode(data, "Grayscale");
    ASSERT_EQ(g.shape(), (Shape{H, W, 1}));
    for (int64_t i = 0; i < H * W; ++i) {
      const uint8_t* s = p + i * 3;
      int l = int((uint32_t(s[0]) * 19595 + uint32_t(s[1]) * 38470 + uint32_t(s[2]) * 7471 + 0x8000) >> 16);
      ASSERT_EQ(int(g.data<uint8_t>()[i]), l);
    }
  }
}

TEST(ImageDecoder, PaletteBmp) {
  const uint8_t pal[4][3] = {{0, 0, 0}, {255, 0, 0}, {0, 255, 0}, {10, 20, 30}};
  for (bool rle : {false, true}) {
    Tensor t = image_decode(encode_bmp8(rle));
    ASSERT_EQ(t.shape(), (Shape{H, W, 3}));
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x)
        for (int k = 0; k < 3; ++k) ASSERT_EQ(t.data<uint8_t>()[(y * W + x) * 3 + k], pal[(x + y) % 4][k]);
  }
}

TEST(ImageDecoder, PnmVariants) {
  // P5 gray, 16-bit maxval: values scale to 8 bits; RGB replicates gray.
  {
    std::string s = "P5 2 1 65535\n";
    Bytes b(s.begin(), s.end());
    b.insert(b.end(), {0xFF, 0xFF, 0x80, 0x00});
    Tensor t = image_decode(b);
    ASSERT_EQ(t.shape(), (Shape{1, 2, 3}));
    EXPECT_EQ(t.data<uint8_t>()[0], 255);
    EXPECT_EQ(t.data<uint8_t>()[2], 255);
    EXPECT_EQ(t.data<uint8_t>()[3], 128);
    Tensor g = image_decode(b, "Grayscale");
    ASSERT_EQ(g.shape(), (Shape{1, 2, 1}));
    EXPECT_EQ(g.data<uint8_t>()[1], 128);
  }
  // P1 ascii bitmap (1 = black), digits unseparated; P4 binary bitmap.
  {
    std::string s = "P1\n3 2\n101\n0 1 0";
    Tensor t = image_decode(Bytes(s.begin(), s.end()), "Grayscale");
    ASSERT_EQ(t.shape(), (Shape{2, 3, 1}));
    const uint8_t want[] = {0, 255, 0, 255, 0, 255};
    for (int i = 0; i < 6; ++i) EXPECT_EQ(t.data<uint8_t>()[i], want[i]);
    std::string s4 = "P4\n3 2\n";
    Bytes b(s4.begin(), s4.end());
    b.push_back(0xA0), b.push_back(0x40);
    Tensor t4 = image_decode(b, "Grayscale");
    for (int i = 0; i < 6; ++i) EXPECT_EQ(t4.data<uint8_t>()[i], want[i]);
  }
  // P2 ascii gray with maxval 15.
  {
    std::string s = "P2 2 1 15 15 0";
    Tensor t = image_decode(Bytes(s.begin(), s.end()), "Grayscale");
    EXPECT_EQ(t.data<uint8_t>()[0], 255);
    EXPECT_EQ(t.data<uint8_t>()[1], 0);
  }
  // P7 (PAM) RGB_ALPHA: alpha dropped.
  {
    std::string s = "P7\nWIDTH 1\nHEIGHT 1\nDEPTH 4\nMAXVAL 255\nTUPLTYPE RGB_ALPHA\nENDHDR\n";
    Bytes b(s.begin(), s.end());
    b.insert(b.end(), {1, 2, 3, 4});
    Tensor t = image_decode(b);
    ASSERT_EQ(t.shape(), (Shape{1, 1, 3}));
    EXPECT_EQ(t.data<uint8_t>()[2], 3);
  }
}

TEST(ImageDecoder, BadInputsAreErrors) {
  EXPECT_THROW(image_decode({}), Error);
  EXPECT_THROW(image_decode({'h', 'e', 'l', 'l', 'o'}), Error);
  // Sample above maxval, zero / huge dimensions, bad maxval.
  for (std::string s : {"P2 1 1 10 11", "P5 0 1 255\n", "P6 100000 100000 255\n", "P5 1 1 70000\n\x01\x01",
                        "P3 1 1 255 1 2", "P6 1 1 255\n\x01\x02"}) {
    SCOPED_TRACE(s);
    EXPECT_THROW(image_decode(Bytes(s.begin(), s.end())), Error);
  }
  // BMP with a huge size, or a pixel offset past the end.
  Bytes bmp = encode_bmp(image_pattern(), 24);
  Bytes big = bmp;
  big[18] = 0xFF, big[19] = 0xFF, big[20] = 0xFF, big[21] = 0x7F;
  EXPECT_THROW(image_decode(big), Error);
  Bytes off = bmp;
  off[13] = 0x7F;
  EXPECT_THROW(image_decode(off), Error);
  // Bad pixel_format is a load-time error.
  EXPECT_THROW(image_decode(bmp, "CMYK"), Error);
}

// Every prefix of every format must decode or fail cleanly; cutting the data in half must fail.
TEST(ImageDecoder, TruncatedInputsAreErrors) {
  for (auto& [name, data] : all_formats()) {
    SCOPED_TRACE(name);
    size_t n = data.size();
    EXPECT_THROW(image_decode(Bytes(data.begin(), data.begin() + long(n / 2))), Error);
    size_t step = std::max<size_t>(1, n / 200);
    for (size_t k = 0; k < n; k += step) {
      try {
        image_decode(Bytes(data.begin(), data.begin() + long(k)));
      } catch (const Error&) {
      }
    }
  }
}

// Corrupted bytes (deterministic pseudo-random flips): an error or some image, never a crash.
TEST(ImageDecoder, CorruptInputsDoNotCrash) {
  uint32_t seed = 12345;
  auto rnd = [&]() { return seed = seed * 1664525u + 1013904223u, seed >> 8; };
  for (auto& [name, data] : all_formats()) {
    SCOPED_TRACE(name);
    for (int trial = 0; trial < 150; ++trial) {
      Bytes b = data;
      int flips = 1 + int(rnd() % 4);
      for (int f = 0; f < flips; ++f) b[rnd() % b.size()] = uint8_t(rnd());
      try {
        Tensor t = image_decode(b);
        EXPECT_EQ(t.rank(), 3);
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
      }
    }
  }
}
