// Reference kernels: ImageDecoder.
//
// The format is detected from the magic bytes. BMP and PNM (PBM/PGM/PPM/PAM) are parsed here,
// bounds-checked; JPEG, PNG, TIFF, WebP and JPEG 2000 are decoded from memory by the system
// codec libraries (libjpeg-turbo, libpng, libtiff, libwebp, openjpeg).
//
// Error handling with the C libraries: libjpeg and libpng report fatal errors through a callback
// that must not return; ours longjmp back to a setjmp in a plain C-style function that holds no
// C++ objects (only PODs and malloc'd buffers), so no destructor is ever skipped. The other
// libraries return error codes. Every failure becomes an InvalidArgument error naming the format
// and the library's message. Decoded images are capped at kMaxPixels pixels.
//
// Channel semantics follow the ONNX reference (Pillow): "RGB"/"BGR" give 3 channels (alpha is
// dropped, gray is replicated); "Grayscale" gives 1 channel, converted from color with
// L = (19595 R + 38470 G + 7471 B + 2^15) >> 16 (ITU-R 601 luma in 16-bit fixed point).
#include "ops/common.hpp"

#include <cstdio>  // before jpeglib.h (FILE)

#include <jpeglib.h>
#include <jerror.h>
#include <openjpeg.h>
#include <png.h>
#include <tiffio.h>
#include <webp/decode.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <csetjmp>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace basalt {
namespace {

constexpr int64_t kMaxPixels = int64_t(1) << 28;
constexpr size_t kErrLen = 256;

// A decoded image: h x w pixels of c (1 = gray, 3 = RGB) interleaved 8-bit channels.
struct Image {
  int64_t h = 0, w = 0;
  int c = 0;
  std::vector<uint8_t> px;
};

[[noreturn]] void bad(const KernelContext& ctx, const char* fmt, const std::string& msg) {
  ctx.fail(ErrorCode::InvalidArgument, std::string("cannot decode ") + fmt + " image: " + msg);
}

void check_dims(const KernelContext& ctx, const char* fmt, int64_t w, int64_t h) {
  if (w <= 0 || h <= 0) bad(ctx, fmt, "invalid dimensions " + std::to_string(w) + "x" + std::to_string(h));
  if (w > kMaxPixels || h > kMaxPixels || w * h > kMaxPixels)
    bad(ctx, fmt, "image of " + std::to_string(w) + "x" + std::to_string(h) + " pixels exceeds the limit of 2^28 pixels");
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using CBuf = std::unique_ptr<unsigned char, FreeDeleter>;

// ------------------------------------------------------------------------------------------
// JPEG (libjpeg). C-style: no C++ objects live across setjmp/longjmp.

struct JpegErr {
  jpeg_error_mgr pub;
  jmp_buf jb;
  char msg[JMSG_LENGTH_MAX];
};

extern "C" void basalt_jpeg_error_exit(j_common_ptr cinfo) {
  JpegErr* e = reinterpret_cast<JpegErr*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->msg);
  longjmp(e->jb, 1);
}
// Warnings that mean the data is truncated or corrupt are fatal (libjpeg would otherwise pad a
// truncated image with gray); other warnings and trace messages are ignored.
extern "C" void basalt_jpeg_emit_message(j_common_ptr cinfo, int level) {
  if (level != -1) return;
  int code = cinfo->err->msg_code;
  if (code == JWRN_JPEG_EOF || code == JWRN_HUFF_BAD_CODE || code == JWRN_HIT_MARKER || code == JWRN_MUST_RESYNC)
    basalt_jpeg_error_exit(cinfo);
}
extern "C" void basalt_jpeg_output_message(j_common_ptr) {}

// Always decodes to RGB: "Grayscale" is then converted like every other format (decoding straight
// to libjpeg's luma differs from the reference data, e.g. 144 vs 141).
// Returns 1 on success with *out malloc'd (h*w*c bytes); on failure writes err and returns 0.
int jpeg_decode_c(const unsigned char* data, size_t n, unsigned char** out, long* ow, long* oh,
                  int* oc, char* err) {
  jpeg_decompress_struct cinfo;
  JpegErr jerr;
  unsigned char* volatile buf = nullptr;
  std::memset(&cinfo, 0, sizeof cinfo);
  cinfo.err = jpeg_std_error(&jerr.pub);
  jerr.pub.error_exit = basalt_jpeg_error_exit;
  jerr.pub.emit_message = basalt_jpeg_emit_message;
  jerr.pub.output_message = basalt_jpeg_output_message;
  jerr.msg[0] = 0;
  if (setjmp(jerr.jb)) {
    std::snprintf(err, kErrLen, "%s", jerr.msg[0] ? jerr.msg : "libjpeg error");
    jpeg_destroy_decompress(&cinfo);
    std::free(buf);
    return 0;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(n));
  jpeg_read_header(&cinfo, TRUE);
  long w = long(cinfo.image_width), h = long(cinfo.image_height);
  if (w <= 0 || h <= 0 || int64_t(w) * h > kMaxPixels) {
    std::snprintf(err, kErrLen, "image of %ldx%ld pixels is empty or exceeds the limit of 2^28 pixels", w, h);
    jpeg_destroy_decompress(&cinfo);
    return 0;
  }
  int cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  if (cmyk)
    cinfo.out_color_space = JCS_CMYK;
  else
    cinfo.out_color_space = JCS_RGB;
  cinfo.dct_method = JDCT_ISLOW;
  cinfo.do_fancy_upsampling = TRUE;
  jpeg_start_decompress(&cinfo);
  long ow_ = long(cinfo.output_width), oh_ = long(cinfo.output_height);
  int comps = cinfo.output_components;
  size_t stride = size_t(ow_) * size_t(comps);
  buf = static_cast<unsigned char*>(std::malloc(stride * size_t(oh_) + 1));
  if (!buf) {
    std::snprintf(err, kErrLen, "out of memory");
    jpeg_destroy_decompress(&cinfo);
    return 0;
  }
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = buf + size_t(cinfo.output_scanline) * stride;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  int saw_adobe = cinfo.saw_Adobe_marker;
  jpeg_destroy_decompress(&cinfo);
  unsigned char* b = buf;
  if (cmyk) {
    // CMYK -> RGB (Adobe files store inverted CMYK). Written in place: 4 -> 3 channels.
    size_t np = size_t(ow_) * size_t(oh_);
    for (size_t i = 0; i < np; ++i) {
      unsigned c = b[4 * i], m = b[4 * i + 1], y = b[4 * i + 2], k = b[4 * i + 3];
      if (!saw_adobe) c = 255 - c, m = 255 - m, y = 255 - y, k = 255 - k;
      b[3 * i] = static_cast<unsigned char>((c * k + 127) / 255);
      b[3 * i + 1] = static_cast<unsigned char>((m * k + 127) / 255);
      b[3 * i + 2] = static_cast<unsigned char>((y * k + 127) / 255);
    }
    comps = 3;
  }
  *out = b;
  *ow = ow_;
  *oh = oh_;
  *oc = comps;
  return 1;
}

// Runs one of the C-style decoders (jpeg_decode_c, png_decode_c: malloc'd pixels, an error
// message buffer) and takes its pixels into an Image; a failure is an InvalidArgument naming fmt.
using CDecoder = int (*)(const unsigned char*, size_t, unsigned char**, long*, long*, int*, char*);
Image decode_with(const KernelContext& ctx, CDecoder decode, const char* fmt, const uint8_t* d, size_t n) {
  char err[kErrLen] = {0};
  unsigned char* out = nullptr;
  long w = 0, h = 0;
  int c = 0;
  if (!decode(d, n, &out, &w, &h, &c, err)) bad(ctx, fmt, err);
  CBuf hold(out);
  Image img;
  img.w = w, img.h = h, img.c = c;
  img.px.assign(out, out + size_t(w) * size_t(h) * size_t(c));
  return img;
}

Image decode_jpeg(const KernelContext& ctx, const uint8_t* d, size_t n) { return decode_with(ctx, jpeg_decode_c, "JPEG", d, n); }

// ------------------------------------------------------------------------------------------
// PNG (libpng). C-style, like JPEG.

struct PngCtx {
  const unsigned char* d;
  size_t n, pos;
  char msg[kErrLen];
};

extern "C" void basalt_png_error(png_structp png, png_const_charp msg) {
  PngCtx* c = static_cast<PngCtx*>(png_get_error_ptr(png));
  std::snprintf(c->msg, kErrLen, "%s", msg ? msg : "libpng error");
  png_longjmp(png, 1);
}
extern "C" void basalt_png_warning(png_structp, png_const_charp) {}
extern "C" void basalt_png_read(png_structp png, png_bytep out, png_size_t len) {
  PngCtx* c = static_cast<PngCtx*>(png_get_io_ptr(png));
  if (len > c->n - c->pos) png_error(png, "truncated PNG data");
  std::memcpy(out, c->d + c->pos, len);
  c->pos += len;
}

int png_decode_c(const unsigned char* data, size_t n, unsigned char** out, long* ow, long* oh, int* oc, char* err) {
  PngCtx ctx;
  ctx.d = data;
  ctx.n = n;
  ctx.pos = 0;
  ctx.msg[0] = 0;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &ctx, basalt_png_error, basalt_png_warning);
  if (!png) {
    std::snprintf(err, kErrLen, "cannot create libpng reader");
    return 0;
  }
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    std::snprintf(err, kErrLen, "cannot create libpng reader");
    return 0;
  }
  unsigned char* volatile buf = nullptr;
  png_bytep* volatile rows = nullptr;
  if (setjmp(png_jmpbuf(png))) {
    std::snprintf(err, kErrLen, "%s", ctx.msg[0] ? ctx.msg : "libpng error");
    png_destroy_read_struct(&png, &info, nullptr);
    std::free(buf);
    std::free(rows);
    return 0;
  }
  png_set_read_fn(png, &ctx, basalt_png_read);
  png_read_info(png, info);
  png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  if (w == 0 || h == 0 || int64_t(w) * int64_t(h) > kMaxPixels) {
    std::snprintf(err, kErrLen, "image of %lux%lu pixels is empty or exceeds the limit of 2^28 pixels",
                  static_cast<unsigned long>(w), static_cast<unsigned long>(h));
    png_destroy_read_struct(&png, &info, nullptr);
    return 0;
  }
  int color = png_get_color_type(png, info);
  int depth = png_get_bit_depth(png, info);
  if (depth == 16) png_set_strip_16(png);  // keep the high byte (as Pillow does)
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (color & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  int channels = png_get_channels(png, info);
  size_t rowbytes = png_get_rowbytes(png, info);
  if ((channels != 1 && channels != 3) || rowbytes != size_t(w) * size_t(channels)) {
    std::snprintf(err, kErrLen, "unsupported PNG layout (color type %d, bit depth %d)", color, depth);
    png_destroy_read_struct(&png, &info, nullptr);
    return 0;
  }
  buf = static_cast<unsigned char*>(std::malloc(rowbytes * h));
  rows = static_cast<png_bytep*>(std::malloc(sizeof(png_bytep) * h));
  if (!buf || !rows) png_error(png, "out of memory");
  for (png_uint_32 y = 0; y < h; ++y) rows[y] = buf + size_t(y) * rowbytes;
  png_read_image(png, rows);
  png_destroy_read_struct(&png, &info, nullptr);
  std::free(rows);
  *out = buf;
  *ow = long(w);
  *oh = long(h);
  *oc = channels;
  return 1;
}

Image decode_png(const KernelContext& ctx, const uint8_t* d, size_t n) { return decode_with(ctx, png_decode_c, "PNG", d, n); }

// ------------------------------------------------------------------------------------------
// TIFF (libtiff, client I/O on a memory buffer). No longjmp: errors are returned.

struct TiffMem {
  const unsigned char* d;
  uint64_t n, pos;
  char msg[kErrLen];
};

extern "C" tmsize_t basalt_tiff_read(thandle_t h, void* buf, tmsize_t size) {
  TiffMem* m = static_cast<TiffMem*>(h);
  if (size <= 0 || m->pos >= m->n) return 0;
  uint64_t k = std::min<uint64_t>(uint64_t(size), m->n - m->pos);
  std::memcpy(buf, m->d + m->pos, size_t(k));
  m->pos += k;
  return tmsize_t(k);
}
extern "C" tmsize_t basalt_tiff_write(thandle_t, void*, tmsize_t) { return 0; }
extern "C" toff_t basalt_tiff_seek(thandle_t h, toff_t off, int whence) {
  TiffMem* m = static_cast<TiffMem*>(h);
  uint64_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? m->pos : m->n;
  // toff_t is unsigned; a negative relative offset arrives as a wrapped value.
  uint64_t np = base + uint64_t(off);
  if (whence != SEEK_SET && int64_t(off) < 0 && uint64_t(-int64_t(off)) > base) return toff_t(-1);
  m->pos = np;
  return toff_t(np);
}
extern "C" int basalt_tiff_close(thandle_t) { return 0; }
extern "C" toff_t basalt_tiff_size(thandle_t h) { return static_cast<TiffMem*>(h)->n; }
extern "C" int basalt_tiff_map(thandle_t, void**, toff_t*) { return 0; }
extern "C" void basalt_tiff_unmap(thandle_t, void*, toff_t) {}
extern "C" int basalt_tiff_error(TIFF*, void* user, const char* module, const char* fmt, va_list ap) {
  TiffMem* m = static_cast<TiffMem*>(user);
  if (m && !m->msg[0]) {
    int k = module ? std::snprintf(m->msg, kErrLen, "%.100s: ", module) : 0;
    if (k < 0) k = 0;
    std::vsnprintf(m->msg + k, kErrLen - size_t(k), fmt, ap);
  }
  return 1;  // handled: do not call the global handler (which prints to stderr)
}
extern "C" int basalt_tiff_warning(TIFF*, void*, const char*, const char*, va_list) { return 1; }

Image decode_tiff(const KernelContext& ctx, const uint8_t* d, size_t n) {
  TiffMem m;
  m.d = d;
  m.n = n;
  m.pos = 0;
  m.msg[0] = 0;
  TIFFOpenOptions* opts = TIFFOpenOptionsAlloc();
  if (!opts) bad(ctx, "TIFF", "out of memory");
  TIFFOpenOptionsSetErrorHandlerExtR(opts, basalt_tiff_error, &m);
  TIFFOpenOptionsSetWarningHandlerExtR(opts, basalt_tiff_warning, &m);
  TIFFOpenOptionsSetMaxSingleMemAlloc(opts, tmsize_t(kMaxPixels) * 4 + 4096);
  TIFF* tif = TIFFClientOpenExt("memory", "rm", &m, basalt_tiff_read, basalt_tiff_write, basalt_tiff_seek,
                                basalt_tiff_close, basalt_tiff_size, basalt_tiff_map, basalt_tiff_unmap, opts);
  TIFFOpenOptionsFree(opts);
  if (!tif) bad(ctx, "TIFF", m.msg[0] ? m.msg : "cannot open");
  struct Closer {
    TIFF* t;
    ~Closer() { TIFFClose(t); }
  } closer{tif};
  uint32_t w = 0, h = 0;
  if (!TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &w) || !TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &h))
    bad(ctx, "TIFF", "missing image dimensions");
  check_dims(ctx, "TIFF", w, h);
  char emsg[1024] = {0};
  if (!TIFFRGBAImageOK(tif, emsg)) bad(ctx, "TIFF", emsg[0] ? emsg : "unsupported TIFF layout");
  uint16_t photometric = 0;
  if (!TIFFGetField(tif, TIFFTAG_PHOTOMETRIC, &photometric)) photometric = PHOTOMETRIC_RGB;
  uint16_t spp = 1;
  TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLESPERPIXEL, &spp);
  bool gray = (photometric == PHOTOMETRIC_MINISBLACK || photometric == PHOTOMETRIC_MINISWHITE) && spp <= 2;
  size_t np = size_t(w) * size_t(h);
  // Not zero-filled: a corrupt header claiming a huge size costs no page faults.
  std::unique_ptr<uint32_t[]> raster(new uint32_t[np]);
  if (!TIFFReadRGBAImageOriented(tif, w, h, raster.get(), ORIENTATION_TOPLEFT, 1))
    bad(ctx, "TIFF", m.msg[0] ? m.msg : "cannot read image data");
  if (m.msg[0]) bad(ctx, "TIFF", m.msg);
  Image img;
  img.w = w, img.h = h, img.c = gray ? 1 : 3;
  img.px.resize(np * size_t(img.c));
  for (size_t i = 0; i < np; ++i) {
    uint32_t p = raster[i];
    if (gray) {
      img.px[i] = uint8_t(TIFFGetR(p));
    } else {
      img.px[3 * i] = uint8_t(TIFFGetR(p));
      img.px[3 * i + 1] = uint8_t(TIFFGetG(p));
      img.px[3 * i + 2] = uint8_t(TIFFGetB(p));
    }
  }
  return img;
}

// ------------------------------------------------------------------------------------------
// WebP (libwebp).

Image decode_webp(const KernelContext& ctx, const uint8_t* d, size_t n) {
  WebPBitstreamFeatures feat;
  if (WebPGetFeatures(d, n, &feat) != VP8_STATUS_OK) bad(ctx, "WebP", "invalid or truncated header");
  if (feat.has_animation) bad(ctx, "WebP", "animated WebP is not supported");
  int w = feat.width, h = feat.height;
  check_dims(ctx, "WebP", w, h);
  int ow = 0, oh = 0;
  uint8_t* out = WebPDecodeRGB(d, n, &ow, &oh);
  if (!out) bad(ctx, "WebP", "corrupt or truncated data");
  struct Freer {
    uint8_t* p;
    ~Freer() { WebPFree(p); }
  } hold{out};
  if (ow != w || oh != h) bad(ctx, "WebP", "decoded size does not match the header");
  Image img;
  img.w = w, img.h = h, img.c = 3;
  img.px.assign(out, out + size_t(w) * size_t(h) * 3);
  return img;
}

// ------------------------------------------------------------------------------------------
// JPEG 2000 (openjpeg, memory stream). No longjmp: errors are returned.

struct OpjMem {
  const unsigned char* d;
  OPJ_UINT64 n, pos;
  char msg[kErrLen];
};

extern "C" OPJ_SIZE_T basalt_opj_read(void* buf, OPJ_SIZE_T nb, void* ud) {
  OpjMem* m = static_cast<OpjMem*>(ud);
  if (m->pos >= m->n) return OPJ_SIZE_T(-1);
  OPJ_UINT64 k = std::min<OPJ_UINT64>(nb, m->n - m->pos);
  std::memcpy(buf, m->d + m->pos, size_t(k));
  m->pos += k;
  return OPJ_SIZE_T(k);
}
extern "C" OPJ_OFF_T basalt_opj_skip(OPJ_OFF_T nb, void* ud) {
  OpjMem* m = static_cast<OpjMem*>(ud);
  if (nb < 0) {
    if (OPJ_UINT64(-nb) > m->pos) return -1;
    m->pos -= OPJ_UINT64(-nb);
    return nb;
  }
  OPJ_UINT64 k = std::min<OPJ_UINT64>(OPJ_UINT64(nb), m->n > m->pos ? m->n - m->pos : 0);
  m->pos += k;
  return k == 0 && nb > 0 ? -1 : OPJ_OFF_T(k);
}
extern "C" OPJ_BOOL basalt_opj_seek(OPJ_OFF_T nb, void* ud) {
  OpjMem* m = static_cast<OpjMem*>(ud);
  if (nb < 0 || OPJ_UINT64(nb) > m->n) return OPJ_FALSE;
  m->pos = OPJ_UINT64(nb);
  return OPJ_TRUE;
}
extern "C" void basalt_opj_error(const char* msg, void* ud) {
  OpjMem* m = static_cast<OpjMem*>(ud);
  if (m && !m->msg[0]) {
    std::snprintf(m->msg, kErrLen, "%s", msg ? msg : "openjpeg error");
    size_t l = std::strlen(m->msg);
    while (l && (m->msg[l - 1] == '\n' || m->msg[l - 1] == '\r')) m->msg[--l] = 0;
  }
}
extern "C" void basalt_opj_quiet(const char*, void*) {}

uint8_t opj_to8(OPJ_INT32 v, const opj_image_comp_t& c) {
  int64_t x = v;
  if (c.sgnd) x += int64_t(1) << (c.prec - 1);
  int64_t maxv = (int64_t(1) << c.prec) - 1;
  x = std::clamp<int64_t>(x, 0, maxv);
  if (c.prec > 8) x >>= (c.prec - 8);
  else if (c.prec < 8) x = (x * 255 + maxv / 2) / maxv;
  return uint8_t(x);
}

Image decode_jpeg2k(const KernelContext& ctx, const uint8_t* d, size_t n, bool jp2) {
  OpjMem m;
  m.d = d;
  m.n = n;
  m.pos = 0;
  m.msg[0] = 0;
  opj_stream_t* s = opj_stream_default_create(OPJ_TRUE);
  if (!s) bad(ctx, "JPEG 2000", "out of memory");
  opj_stream_set_read_function(s, basalt_opj_read);
  opj_stream_set_skip_function(s, basalt_opj_skip);
  opj_stream_set_seek_function(s, basalt_opj_seek);
  opj_stream_set_user_data(s, &m, nullptr);
  opj_stream_set_user_data_length(s, n);
  opj_codec_t* codec = opj_create_decompress(jp2 ? OPJ_CODEC_JP2 : OPJ_CODEC_J2K);
  opj_image_t* im = nullptr;
  struct Cleanup {
    opj_stream_t* s;
    opj_codec_t* c;
    opj_image_t** im;
    ~Cleanup() {
      if (*im) opj_image_destroy(*im);
      if (c) opj_destroy_codec(c);
      opj_stream_destroy(s);
    }
  } cleanup{s, codec, &im};
  if (!codec) bad(ctx, "JPEG 2000", "out of memory");
  opj_set_error_handler(codec, basalt_opj_error, &m);
  opj_set_warning_handler(codec, basalt_opj_quiet, &m);
  opj_set_info_handler(codec, basalt_opj_quiet, &m);
  opj_dparameters_t params;
  opj_set_default_decoder_parameters(&params);
  if (!opj_setup_decoder(codec, &params)) bad(ctx, "JPEG 2000", m.msg[0] ? m.msg : "decoder setup failed");
  opj_decoder_set_strict_mode(codec, OPJ_TRUE);  // truncated codestreams are errors
  if (!opj_read_header(s, codec, &im) || !im) bad(ctx, "JPEG 2000", m.msg[0] ? m.msg : "invalid header");
  int64_t w = int64_t(im->x1) - int64_t(im->x0), h = int64_t(im->y1) - int64_t(im->y0);
  check_dims(ctx, "JPEG 2000", w, h);
  if (im->numcomps < 1) bad(ctx, "JPEG 2000", "image has no components");
  if (!opj_decode(codec, s, im) || !opj_end_decompress(codec, s))
    bad(ctx, "JPEG 2000", m.msg[0] ? m.msg : "corrupt or truncated data");
  int nc = im->numcomps >= 3 ? 3 : 1;
  for (int k = 0; k < nc; ++k) {
    const opj_image_comp_t& c = im->comps[k];
    if (!c.data || c.w == 0 || c.h == 0 || c.dx == 0 || c.dy == 0 || c.prec < 1 || c.prec > 31)
      bad(ctx, "JPEG 2000", "invalid component " + std::to_string(k));
  }
  // Output size: the reference grid of the image (components may be subsampled).
  w = im->comps[0].w * int64_t(im->comps[0].dx);
  h = im->comps[0].h * int64_t(im->comps[0].dy);
  w = std::min<int64_t>(w, int64_t(im->x1) - int64_t(im->x0));
  h = std::min<int64_t>(h, int64_t(im->y1) - int64_t(im->y0));
  check_dims(ctx, "JPEG 2000", w, h);
  bool ycc = nc == 3 && im->color_space == OPJ_CLRSPC_SYCC;
  Image img;
  img.w = w, img.h = h, img.c = nc;
  img.px.resize(size_t(w) * size_t(h) * size_t(nc));
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x) {
      int v[3] = {0, 0, 0};
      for (int k = 0; k < nc; ++k) {
        const opj_image_comp_t& c = im->comps[k];
        int64_t cx = std::min<int64_t>(x / c.dx, int64_t(c.w) - 1), cy = std::min<int64_t>(y / c.dy, int64_t(c.h) - 1);
        v[k] = opj_to8(c.data[cy * int64_t(c.w) + cx], c);
      }
      uint8_t* o = &img.px[size_t((y * w + x) * nc)];
      if (ycc) {
        double Y = v[0], cb = v[1] - 128.0, cr = v[2] - 128.0;
        double rgb[3] = {Y + 1.402 * cr, Y - 0.344136 * cb - 0.714136 * cr, Y + 1.772 * cb};
        for (int k = 0; k < 3; ++k) o[k] = uint8_t(std::clamp(std::lround(rgb[k]), 0L, 255L));
      } else {
        for (int k = 0; k < nc; ++k) o[k] = uint8_t(v[k]);
      }
    }
  return img;
}

// ------------------------------------------------------------------------------------------
// BMP (own parser).

uint32_t le16(const uint8_t* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8; }
uint32_t le32(const uint8_t* p) { return le16(p) | le16(p + 2) << 16; }

// Extracts a channel given a bit mask and scales it to 8 bits.
struct MaskChan {
  uint32_t mask = 0;
  int shift = 0, bits = 0;
  explicit MaskChan(uint32_t m = 0) : mask(m) {
    if (!m) return;
    while (!((m >> shift) & 1)) ++shift;
    while (shift + bits < 32 && ((m >> (shift + bits)) & 1)) ++bits;
  }
  uint8_t get(uint32_t v) const {
    if (!mask) return 0;
    uint32_t x = (v & mask) >> shift;
    if (bits >= 8) return uint8_t(x >> (bits - 8));
    uint32_t maxv = (1u << bits) - 1;
    return uint8_t((x * 255 + maxv / 2) / maxv);
  }
};

// A BMP's palette (bpp <= 8) as RGB triples, 2^bpp entries (those the file lacks black).
std::vector<uint8_t> bmp_palette(const KernelContext& ctx, const uint8_t* d, size_t n, int bpp, bool core, uint32_t ncolors,
                                 uint32_t hsize, uint32_t comp) {
  const char* F = "BMP";
  size_t entry = core ? 3 : 4;
  size_t maxc = size_t(1) << bpp;
  size_t count = core || ncolors == 0 ? maxc : std::min<size_t>(ncolors, maxc);
  size_t po = 14 + size_t(hsize) + ((comp == 3 || comp == 6) && hsize == 40 ? 12 : 0);
  if (po > n || count > (n - po) / entry) bad(ctx, F, "truncated palette");
  std::vector<uint8_t> pal(maxc * 3, 0);
  for (size_t i = 0; i < count; ++i) {
    const uint8_t* p = d + po + i * entry;
    pal[3 * i] = p[2], pal[3 * i + 1] = p[1], pal[3 * i + 2] = p[0];
  }
  return pal;
}

Image decode_bmp(const KernelContext& ctx, const uint8_t* d, size_t n) {
  const char* F = "BMP";
  if (n < 26) bad(ctx, F, "truncated header");
  uint32_t data_off = le32(d + 10);
  uint32_t hsize = le32(d + 14);
  if (hsize < 12 || size_t(14) + hsize > n) bad(ctx, F, "truncated or invalid info header (size " + std::to_string(hsize) + ")");
  const uint8_t* ih = d + 14;
  int64_t w, h;
  int bpp;
  uint32_t comp = 0, ncolors = 0;
  bool core = hsize == 12;  // OS/2 BITMAPCOREHEADER: 16-bit dims, 3-byte palette entries
  if (core) {
    w = le16(ih + 4);
    h = int16_t(le16(ih + 6));
    bpp = int(le16(ih + 10));
  } else {
    if (hsize < 16) bad(ctx, F, "invalid info header size " + std::to_string(hsize));
    w = int32_t(le32(ih + 4));
    h = int32_t(le32(ih + 8));
    bpp = hsize >= 16 ? int(le16(ih + 14)) : 0;
    comp = hsize >= 20 ? le32(ih + 16) : 0;
    ncolors = hsize >= 36 ? le32(ih + 32) : 0;
  }
  bool top_down = h < 0;
  if (top_down) h = -h;
  check_dims(ctx, F, w, h);
  // Compression: 0 RGB, 1 RLE8, 2 RLE4, 3 BITFIELDS, 6 ALPHABITFIELDS.
  if (comp != 0 && comp != 1 && comp != 2 && comp != 3 && comp != 6)
    bad(ctx, F, "unsupported compression " + std::to_string(comp));
  if (bpp != 1 && bpp != 2 && bpp != 4 && bpp != 8 && bpp != 16 && bpp != 24 && bpp != 32)
    bad(ctx, F, "unsupported bit depth " + std::to_string(bpp));
  if ((comp == 1 && bpp != 8) || (comp == 2 && bpp != 4)) bad(ctx, F, "RLE compression does not match the bit depth");
  if ((comp == 3 || comp == 6) && bpp != 16 && bpp != 32) bad(ctx, F, "BITFIELDS compression needs 16 or 32 bits per pixel");
  if (top_down && (comp == 1 || comp == 2)) bad(ctx, F, "RLE images cannot be top-down");

  // Channel masks for 16/32-bit images.
  MaskChan mr, mg, mb;
  if (bpp == 16 || bpp == 32) {
    if (comp == 3 || comp == 6) {
      // Masks follow a 40-byte header, or live inside a V2+ header.
      size_t mo = 14 + 40;
      if (mo + 12 > n) bad(ctx, F, "truncated color masks");
      mr = MaskChan(le32(d + mo));
      mg = MaskChan(le32(d + mo + 4));
      mb = MaskChan(le32(d + mo + 8));
    } else if (bpp == 16) {
      mr = MaskChan(0x7C00), mg = MaskChan(0x03E0), mb = MaskChan(0x001F);
    } else {
      mr = MaskChan(0x00FF0000), mg = MaskChan(0x0000FF00), mb = MaskChan(0x000000FF);
    }
  }

  const std::vector<uint8_t> pal = bpp <= 8 ? bmp_palette(ctx, d, n, bpp, core, ncolors, hsize, comp) : std::vector<uint8_t>{};

  if (data_off >= n) bad(ctx, F, "pixel data offset " + std::to_string(data_off) + " is past the end of the file");
  const uint8_t* pd = d + data_off;
  size_t avail = n - data_off;
  size_t stride = ((size_t(w) * size_t(bpp) + 31) / 32) * 4;
  if (comp != 1 && comp != 2 && size_t(h) > avail / stride) {
    // The last row may lack its padding.
    size_t last = (size_t(w) * size_t(bpp) + 7) / 8;
    if (size_t(h - 1) > avail / stride || size_t(h - 1) * stride + last > avail) bad(ctx, F, "truncated pixel data");
  }
  Image img;
  img.w = w, img.h = h, img.c = 3;
  auto put_index = [&](int64_t x, int64_t row, unsigned idx) {  // row in file order (bottom-up)
    int64_t y = top_down ? row : h - 1 - row;
    uint8_t* o = &img.px[size_t((y * w + x) * 3)];
    o[0] = pal[3 * idx], o[1] = pal[3 * idx + 1], o[2] = pal[3 * idx + 2];
  };
  // Run-length encoded (bottom-up). Pixels not written stay black. A first pass (write=false)
  // validates the data before the image is allocated.
  auto run_rle = [&](bool write) {
    size_t i = 0;
    int64_t x = 0, row = 0;
    bool rle4 = comp == 2;
    auto need = [&](size_t k) {
      if (k > avail - i) bad(ctx, F, "truncated RLE data");
    };
    while (true) {
      need(2);
      unsigned a = pd[i], b = pd[i + 1];
      i += 2;
      if (a > 0) {  // a pixels of value b (RLE4: alternating nibbles)
        for (unsigned k = 0; write && k < a; ++k, ++x) {
          if (x >= w || row >= h) continue;
          unsigned idx = rle4 ? (k & 1 ? b & 15 : b >> 4) : b;
          put_index(x, row, idx);
        }
      } else if (b == 0) {  // end of line
        x = 0;
        ++row;
      } else if (b == 1) {  // end of bitmap
        break;
      } else if (b == 2) {  // delta
        need(2);
        x += pd[i];
        row += pd[i + 1];
        i += 2;
      } else {  // absolute run of b pixels, padded to 16 bits
        size_t bytes = rle4 ? (b + 1) / 2 : b;
        size_t padded = (bytes + 1) & ~size_t(1);
        need(padded);
        for (unsigned k = 0; write && k < b; ++k, ++x) {
          unsigned idx = rle4 ? (k & 1 ? pd[i + k / 2] & 15 : pd[i + k / 2] >> 4) : pd[i + k];
          if (x < w && row < h) put_index(x, row, idx);
        }
        i += padded;
      }
      if (row > h) break;
    }
  };
  if (comp == 1 || comp == 2) run_rle(false);
  img.px.assign(size_t(w) * size_t(h) * 3, 0);
  if (comp == 1 || comp == 2) {
    run_rle(true);
    return img;
  }

  for (int64_t row = 0; row < h; ++row) {
    const uint8_t* r = pd + size_t(row) * stride;
    int64_t y = top_down ? row : h - 1 - row;
    uint8_t* o = &img.px[size_t(y * w * 3)];
    for (int64_t x = 0; x < w; ++x, o += 3) {
      if (bpp <= 8) {
        size_t bit = size_t(x) * size_t(bpp);
        unsigned idx = (r[bit / 8] >> (8 - bpp - bit % 8)) & ((1u << bpp) - 1);
        o[0] = pal[3 * idx], o[1] = pal[3 * idx + 1], o[2] = pal[3 * idx + 2];
      } else if (bpp == 24) {
        const uint8_t* p = r + x * 3;
        o[0] = p[2], o[1] = p[1], o[2] = p[0];
      } else {
        uint32_t v = bpp == 16 ? le16(r + x * 2) : le32(r + x * 4);
        o[0] = mr.get(v), o[1] = mg.get(v), o[2] = mb.get(v);
      }
    }
  }
  return img;
}

// ------------------------------------------------------------------------------------------
// PNM: P1/P4 (bitmap), P2/P5 (gray), P3/P6 (RGB), P7 (PAM). Own parser.

struct PnmReader {
  const KernelContext& ctx;
  const uint8_t* d;
  size_t n, pos = 0;
  void skip_ws_comments() {
    while (pos < n) {
      if (d[pos] == '#') {
        while (pos < n && d[pos] != '\n' && d[pos] != '\r') ++pos;
      } else if (d[pos] == ' ' || d[pos] == '\t' || d[pos] == '\n' || d[pos] == '\r' || d[pos] == '\v' || d[pos] == '\f') {
        ++pos;
      } else {
        break;
      }
    }
  }
  int64_t number(const char* what) {
    skip_ws_comments();
    if (pos >= n || d[pos] < '0' || d[pos] > '9') bad(ctx, "PNM", std::string("expected a number for ") + what);
    int64_t v = 0;
    while (pos < n && d[pos] >= '0' && d[pos] <= '9') {
      v = v * 10 + (d[pos++] - '0');
      if (v > (int64_t(1) << 40)) bad(ctx, "PNM", std::string("number too large for ") + what);
    }
    return v;
  }
  std::string token() {
    skip_ws_comments();
    std::string s;
    while (pos < n && !std::isspace(d[pos])) s.push_back(char(d[pos++]));
    return s;
  }
};

Image decode_pnm(const KernelContext& ctx, const uint8_t* d, size_t n) {
  const char* F = "PNM";
  char kind = char(d[1]);
  PnmReader rd{ctx, d, n, 2};
  int64_t w = 0, h = 0, maxval = 1, depth = 0;
  if (kind == '7') {
    bool end = false;
    while (!end) {
      std::string key = rd.token();
      if (key.empty()) bad(ctx, F, "truncated PAM header");
      if (key == "WIDTH") w = rd.number("WIDTH");
      else if (key == "HEIGHT") h = rd.number("HEIGHT");
      else if (key == "DEPTH") depth = rd.number("DEPTH");
      else if (key == "MAXVAL") maxval = rd.number("MAXVAL");
      else if (key == "TUPLTYPE") {
        while (rd.pos < n && d[rd.pos] != '\n') ++rd.pos;
      } else if (key == "ENDHDR") end = true;
      else bad(ctx, F, "unknown PAM header field '" + key.substr(0, 32) + "'");
    }
    if (rd.pos < n && d[rd.pos] == '\r') ++rd.pos;
    if (rd.pos >= n || d[rd.pos] != '\n') bad(ctx, F, "truncated PAM header");
    ++rd.pos;
    if (depth < 1 || depth > 4) bad(ctx, F, "unsupported PAM depth " + std::to_string(depth));
  } else {
    w = rd.number("width");
    h = rd.number("height");
    if (kind != '1' && kind != '4') maxval = rd.number("maxval");
    depth = (kind == '3' || kind == '6') ? 3 : 1;
  }
  check_dims(ctx, F, w, h);
  if (maxval < 1 || maxval > 65535) bad(ctx, F, "invalid maxval " + std::to_string(maxval));
  bool ascii = kind == '1' || kind == '2' || kind == '3';
  if (!ascii) {
    // Exactly one whitespace byte separates the header from the binary data.
    if (rd.pos >= n || !std::isspace(d[rd.pos])) {
      if (kind != '7') bad(ctx, F, "truncated header");
    } else if (kind != '7') {
      ++rd.pos;
    }
  }
  int color_ch = depth >= 3 ? 3 : 1;  // PAM: GRAY(1), GRAY_ALPHA(2), RGB(3), RGB_ALPHA(4)
  size_t np = size_t(w) * size_t(h);
  size_t left = n - std::min(n, rd.pos);
  // Minimum bytes the pixel data needs: checked before allocating.
  size_t min_bytes = kind == '4' ? ((size_t(w) + 7) / 8) * size_t(h)
                     : ascii    ? np * size_t(depth)
                                : np * size_t(depth) * (maxval > 255 ? 2 : 1);
  if (min_bytes > left) bad(ctx, F, "truncated pixel data");
  Image img;
  img.w = w, img.h = h, img.c = color_ch;
  img.px.resize(np * size_t(color_ch));
  auto scale = [&](int64_t v) -> uint8_t {
    if (v > maxval) bad(ctx, F, "sample value " + std::to_string(v) + " exceeds maxval " + std::to_string(maxval));
    if (maxval == 255) return uint8_t(v);
    return uint8_t((v * 255 + maxval / 2) / maxval);
  };
  if (kind == '4') {
    size_t stride = (size_t(w) + 7) / 8;
    if (size_t(h) > (n - rd.pos) / stride) bad(ctx, F, "truncated pixel data");
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) {
        unsigned bit = (d[rd.pos + size_t(y) * stride + size_t(x) / 8] >> (7 - x % 8)) & 1;
        img.px[size_t(y * w + x)] = bit ? 0 : 255;
      }
    return img;
  }
  if (ascii) {
    for (size_t i = 0; i < np * size_t(depth); ++i) {
      int64_t v;
      if (kind == '1') {  // digits may be unseparated
        rd.skip_ws_comments();
        if (rd.pos >= n || (d[rd.pos] != '0' && d[rd.pos] != '1')) bad(ctx, F, "truncated or invalid pixel data");
        v = d[rd.pos++] - '0';
        img.px[i] = v ? 0 : 255;
        continue;
      }
      v = rd.number("pixel data");
      img.px[i] = scale(v);
    }
    return img;
  }
  size_t bps = maxval > 255 ? 2 : 1;
  size_t need = np * size_t(depth) * bps;
  if (need > n - rd.pos) bad(ctx, F, "truncated pixel data");
  const uint8_t* p = d + rd.pos;
  for (size_t i = 0; i < np; ++i)
    for (int k = 0; k < depth; ++k) {
      size_t s = (i * size_t(depth) + size_t(k)) * bps;
      int64_t v = bps == 2 ? (int64_t(p[s]) << 8 | p[s + 1]) : p[s];
      if (k < color_ch) img.px[i * size_t(color_ch) + size_t(k)] = scale(v);
    }
  return img;
}

// ------------------------------------------------------------------------------------------

bool starts_with(const uint8_t* d, size_t n, const char* magic, size_t m) {
  return n >= m && std::memcmp(d, magic, m) == 0;
}

Image decode_any(const KernelContext& ctx, const uint8_t* d, size_t n) {
  if (n == 0) ctx.fail(ErrorCode::InvalidArgument, "encoded image is empty");
  if (starts_with(d, n, "\x89PNG\r\n\x1a\n", 8)) return decode_png(ctx, d, n);
  if (starts_with(d, n, "\xff\xd8\xff", 3)) return decode_jpeg(ctx, d, n);
  if (starts_with(d, n, "BM", 2)) return decode_bmp(ctx, d, n);
  if (starts_with(d, n, "II*\0", 4) || starts_with(d, n, "MM\0*", 4) || starts_with(d, n, "II+\0", 4) ||
      starts_with(d, n, "MM\0+", 4))
    return decode_tiff(ctx, d, n);
  if (n >= 12 && starts_with(d, n, "RIFF", 4) && std::memcmp(d + 8, "WEBP", 4) == 0) return decode_webp(ctx, d, n);
  if (starts_with(d, n, "\0\0\0\x0cjP  \r\n\x87\n", 12)) return decode_jpeg2k(ctx, d, n, true);
  if (starts_with(d, n, "\xff\x4f\xff\x51", 4)) return decode_jpeg2k(ctx, d, n, false);
  if (n >= 3 && d[0] == 'P' && d[1] >= '1' && d[1] <= '7' && std::isspace(d[2])) return decode_pnm(ctx, d, n);
  ctx.fail(ErrorCode::InvalidArgument, "unrecognized image format (supported: BMP, JPEG, JPEG 2000, PNG, PNM, TIFF, WebP)");
}

}  // namespace

void register_image_ops(OpRegistry& r) {
  r.add("ImageDecoder", 20, [](const Node& n) {
    std::string fmt = n.attr_string("pixel_format", "RGB");
    if (fmt != "RGB" && fmt != "BGR" && fmt != "Grayscale")
      n.fail(ErrorCode::InvalidModel, "pixel_format must be 'RGB', 'BGR' or 'Grayscale', got '" + fmt + "'");
    int mode = fmt == "RGB" ? 0 : fmt == "BGR" ? 1 : 2;
    return kernel([mode](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      if (x.dtype() != DType::Uint8) unsupported_dtype(ctx, 0, x.dtype());
      if (x.rank() != 1) ctx.fail(ErrorCode::InvalidArgument, "encoded stream must be 1-D, got shape " + shape_str(x.shape()));
      Image img = decode_any(ctx, x.data<uint8_t>(), size_t(x.numel()));
      size_t np = size_t(img.w) * size_t(img.h);
      int oc = mode == 2 ? 1 : 3;
      Tensor& y = ctx.output(0, DType::Uint8, {img.h, img.w, oc});
      uint8_t* o = y.data<uint8_t>();
      const uint8_t* p = img.px.data();
      if (img.c == 1) {
        for (size_t i = 0; i < np; ++i)
          for (int k = 0; k < oc; ++k) o[i * size_t(oc) + size_t(k)] = p[i];
      } else if (mode == 2) {
        for (size_t i = 0; i < np; ++i) {
          const uint8_t* s = p + 3 * i;
          o[i] = uint8_t((uint32_t(s[0]) * 19595 + uint32_t(s[1]) * 38470 + uint32_t(s[2]) * 7471 + 0x8000) >> 16);
        }
      } else if (mode == 1) {
        for (size_t i = 0; i < np; ++i) o[3 * i] = p[3 * i + 2], o[3 * i + 1] = p[3 * i + 1], o[3 * i + 2] = p[3 * i];
      } else {
        std::memcpy(o, p, np * 3);
      }
    });
  });
  // What the planner and the optimizer know of these ops (ops/op_traits.hpp).
  r.def("ImageDecoder").data_dependent_shape();
}

}  // namespace basalt
