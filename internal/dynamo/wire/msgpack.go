package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// A minimal, bounded msgpack reader for the event plane's envelopes and
// payloads. It never allocates per element and never trusts a declared
// length beyond the bytes it holds.

var errMsgpack = errors.New("msgpack")

func mpErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errMsgpack, fmt.Sprintf(format, args...))
}

// maxSkipDepth bounds the nesting of values skipped as unknown.
const maxSkipDepth = 32

type mpReader struct {
	b []byte
	i int
}

func (r *mpReader) left() int { return len(r.b) - r.i }

func (r *mpReader) byte1() (byte, error) {
	if r.i >= len(r.b) {
		return 0, mpErr("truncated")
	}
	c := r.b[r.i]
	r.i++
	return c, nil
}

func (r *mpReader) take(n int) ([]byte, error) {
	if n < 0 || n > r.left() {
		return nil, mpErr("length %d beyond the %d bytes left", n, r.left())
	}
	v := r.b[r.i : r.i+n]
	r.i += n
	return v, nil
}

func (r *mpReader) uintN(n int) (uint64, error) {
	b, err := r.take(n)
	if err != nil {
		return 0, err
	}
	switch n {
	case 1:
		return uint64(b[0]), nil
	case 2:
		return uint64(binary.BigEndian.Uint16(b)), nil
	case 4:
		return uint64(binary.BigEndian.Uint32(b)), nil
	}
	return binary.BigEndian.Uint64(b), nil
}

// container reads a map or array header: the count of entries (pairs for
// a map). A count that cannot fit in the bytes left is an error.
func (r *mpReader) container() (isMap bool, n int, err error) {
	c, err := r.byte1()
	if err != nil {
		return false, 0, err
	}
	var size uint64
	switch {
	case c >= 0x80 && c <= 0x8f:
		isMap, size = true, uint64(c&0x0f)
	case c >= 0x90 && c <= 0x9f:
		size = uint64(c & 0x0f)
	case c == 0xde, c == 0xdc:
		isMap = c == 0xde
		size, err = r.uintN(2)
	case c == 0xdf, c == 0xdd:
		isMap = c == 0xdf
		size, err = r.uintN(4)
	default:
		return false, 0, mpErr("0x%02x is not a map or an array", c)
	}
	if err != nil {
		return false, 0, err
	}
	per := uint64(1)
	if isMap {
		per = 2
	}
	if size*per > uint64(r.left()) {
		return false, 0, mpErr("container of %d entries in %d bytes", size, r.left())
	}
	return isMap, int(size), nil
}

// optUint reads an unsigned integer or nil.
func (r *mpReader) optUint() (v uint64, isNil bool, err error) {
	c, err := r.byte1()
	if err != nil {
		return 0, false, err
	}
	switch {
	case c <= 0x7f:
		return uint64(c), false, nil
	case c == 0xc0:
		return 0, true, nil
	case c >= 0xcc && c <= 0xcf:
		v, err := r.uintN(1 << (c - 0xcc))
		return v, false, err
	case c >= 0xd0 && c <= 0xd3:
		u, err := r.uintN(1 << (c - 0xd0))
		if err != nil {
			return 0, false, err
		}
		bits := uint(8 << (c - 0xd0))
		if u>>(bits-1)&1 == 1 {
			return 0, false, mpErr("negative integer")
		}
		return u, false, nil
	}
	return 0, false, mpErr("0x%02x is not an unsigned integer", c)
}

func (r *mpReader) uint() (uint64, error) {
	v, isNil, err := r.optUint()
	if err == nil && isNil {
		err = mpErr("nil where an integer is required")
	}
	return v, err
}

// raw reads a str or bin value (payloads may come as either).
func (r *mpReader) raw() ([]byte, error) {
	c, err := r.byte1()
	if err != nil {
		return nil, err
	}
	var n uint64
	switch {
	case c >= 0xa0 && c <= 0xbf:
		n = uint64(c & 0x1f)
	case c == 0xd9 || c == 0xc4:
		n, err = r.uintN(1)
	case c == 0xda || c == 0xc5:
		n, err = r.uintN(2)
	case c == 0xdb || c == 0xc6:
		n, err = r.uintN(4)
	default:
		return nil, mpErr("0x%02x is not a string or bytes", c)
	}
	if err != nil {
		return nil, err
	}
	if n > math.MaxInt32 {
		return nil, mpErr("length %d", n)
	}
	return r.take(int(n))
}

// bytesValue reads a byte string: a str or bin value, or an array of
// integers 0-255. The array is how a serializer writes a byte vector it
// was not told to write as bytes, and a decoder of a byte vector (serde's)
// takes it as that vector. The array's bytes are copied; the count is
// bounded by the bytes left (container), one byte at least per element.
func (r *mpReader) bytesValue() ([]byte, error) {
	if c, ok := r.peek(); !ok || !isArrayByte(c) {
		return r.raw()
	}
	_, n, err := r.container()
	if err != nil {
		return nil, err
	}
	out := make([]byte, n)
	for i := range out {
		v, err := r.uint()
		if err != nil {
			return nil, fmt.Errorf("byte %d: %w", i, err)
		}
		if v > 0xff {
			return nil, mpErr("byte %d is %d", i, v)
		}
		out[i] = byte(v)
	}
	return out, nil
}

// peekString reports whether the next value is a string.
func (r *mpReader) peekString() bool {
	if r.i >= len(r.b) {
		return false
	}
	c := r.b[r.i]
	return c >= 0xa0 && c <= 0xbf || c == 0xd9 || c == 0xda || c == 0xdb
}

// peekNil reports whether the next value is nil.
func (r *mpReader) peekNil() bool { return r.i < len(r.b) && r.b[r.i] == 0xc0 }

// skip consumes one value of any type.
func (r *mpReader) skip(depth int) error {
	if depth > maxSkipDepth {
		return mpErr("nesting deeper than %d", maxSkipDepth)
	}
	c, err := r.byte1()
	if err != nil {
		return err
	}
	switch {
	case c <= 0x7f, c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3:
		return nil
	case c >= 0x80 && c <= 0x9f, c == 0xdc, c == 0xdd, c == 0xde, c == 0xdf:
		r.i--
		isMap, n, err := r.container()
		if err != nil {
			return err
		}
		if isMap {
			n *= 2
		}
		for range n {
			if err := r.skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	case c >= 0xa0 && c <= 0xbf, c == 0xd9, c == 0xda, c == 0xdb, c == 0xc4, c == 0xc5, c == 0xc6:
		r.i--
		_, err := r.raw()
		return err
	case c == 0xcc, c == 0xd0:
		_, err := r.take(1)
		return err
	case c == 0xcd, c == 0xd1:
		_, err := r.take(2)
		return err
	case c == 0xce, c == 0xd2, c == 0xca:
		_, err := r.take(4)
		return err
	case c == 0xcf, c == 0xd3, c == 0xcb:
		_, err := r.take(8)
		return err
	case c == 0xd4, c == 0xd5, c == 0xd6, c == 0xd7, c == 0xd8: // fixext 1,2,4,8,16
		_, err := r.take(1 + 1<<(c-0xd4))
		return err
	case c == 0xc7, c == 0xc8, c == 0xc9: // ext 8,16,32
		n, err := r.uintN(1 << (c - 0xc7))
		if err != nil {
			return err
		}
		if n > math.MaxInt32 {
			return mpErr("ext length %d", n)
		}
		_, err = r.take(1 + int(n))
		return err
	}
	return mpErr("0x%02x is not a msgpack type", c)
}

// peek returns the next byte without consuming it.
func (r *mpReader) peek() (byte, bool) {
	if r.i >= len(r.b) {
		return 0, false
	}
	return r.b[r.i], true
}

func isMapByte(c byte) bool   { return c >= 0x80 && c <= 0x8f || c == 0xde || c == 0xdf }
func isArrayByte(c byte) bool { return c >= 0x90 && c <= 0x9f || c == 0xdc || c == 0xdd }
func isIntByte(c byte) bool   { return c <= 0x7f || c >= 0xe0 || c >= 0xcc && c <= 0xd3 }

// notA reports that the next value is not of the type wanted.
func (r *mpReader) notA(want string) error {
	c, ok := r.peek()
	if !ok {
		return mpErr("truncated")
	}
	return mpErr("0x%02x is not a %s", c, want)
}

// key reads a map key: a string (or bytes).
func (r *mpReader) key() ([]byte, error) { return r.raw() }

// optBits64 reads an integer or nil. A non-negative integer is its value;
// a negative one (an i64 written signed) is its two's-complement bits, so
// that every u64 comes back whichever way its writer saw it.
func (r *mpReader) optBits64() (v uint64, isNil bool, err error) {
	c, err := r.byte1()
	if err != nil {
		return 0, false, err
	}
	switch {
	case c <= 0x7f:
		return uint64(c), false, nil
	case c >= 0xe0:
		return uint64(int64(int8(c))), false, nil
	case c == 0xc0:
		return 0, true, nil
	case c >= 0xcc && c <= 0xcf:
		v, err := r.uintN(1 << (c - 0xcc))
		return v, false, err
	case c >= 0xd0 && c <= 0xd3:
		n := 1 << (c - 0xd0)
		u, err := r.uintN(n)
		shift := uint(64 - 8*n)
		return uint64(int64(u<<shift) >> shift), false, err
	}
	return 0, false, mpErr("0x%02x is not an integer", c)
}

func (r *mpReader) bits64() (uint64, error) {
	v, isNil, err := r.optBits64()
	if err == nil && isNil {
		err = mpErr("nil where an integer is required")
	}
	return v, err
}

// optU32 reads a non-negative integer that fits in 32 bits, or nil.
func (r *mpReader) optU32() (v uint32, isNil bool, err error) {
	u, isNil, err := r.optUint()
	if err != nil || isNil {
		return 0, isNil, err
	}
	if u > 1<<32-1 {
		return 0, false, mpErr("%d does not fit in 32 bits", u)
	}
	return uint32(u), false, nil
}

func (r *mpReader) u32() (uint32, error) {
	v, isNil, err := r.optU32()
	if err == nil && isNil {
		err = mpErr("nil where an integer is required")
	}
	return v, err
}
