package chattemplate

import (
	"strconv"
	"strings"
	"time"
)

// strftime formats t as Python's datetime.strftime does on glibc in the C
// locale, for the naive datetime.now() that transformers' strftime_now
// formats: %Z and %z are empty. The flags "-" (no padding), "_" (space
// padding), "0" (zero padding), "^" (upper case) and "#" (upper-case
// names, a lower-case %p), a field width, and the E and O modifiers are
// taken; an unknown directive is written as it is, as glibc does.
func strftime(t time.Time, f string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		c := f[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		start := i
		i++
		flag := byte(0)
		for i < len(f) && strings.IndexByte("-_0^#", f[i]) >= 0 {
			flag = f[i]
			i++
		}
		// A field width pads the result: numbers with zeros (spaces with
		// "_"), names with spaces (zeros with "0").
		fw := 0
		for i < len(f) && f[i] >= '0' && f[i] <= '9' && fw <= maxOutputWidth {
			fw = fw*10 + int(f[i]-'0')
			i++
		}
		for i < len(f) && (f[i] == 'E' || f[i] == 'O') {
			i++
		}
		if i >= len(f) {
			b.WriteString(f[start:])
			break
		}
		num := func(v, width int, pad byte) {
			switch flag {
			case '-':
				pad = 0
			case '_':
				pad = ' '
			case '0':
				pad = '0'
			}
			s := strconv.Itoa(v)
			if fw > 0 {
				// A width never shortens the usual one; with "-" it pads
				// with spaces.
				width = max(width, fw)
				if pad == 0 {
					pad = ' '
				}
			}
			for n := len(s); pad != 0 && n < width; n++ {
				b.WriteByte(pad)
			}
			b.WriteString(s)
		}
		text := func(s string) {
			if flag == '^' || flag == '#' {
				s = strings.ToUpper(s)
			}
			pad := byte(' ')
			if flag == '0' {
				pad = '0'
			}
			for n := len(s); n < fw; n++ {
				b.WriteByte(pad)
			}
			b.WriteString(s)
		}
		hour12 := t.Hour() % 12
		if hour12 == 0 {
			hour12 = 12
		}
		ampm := "AM"
		if t.Hour() >= 12 {
			ampm = "PM"
		}
		isoYear, isoWeek := t.ISOWeek()
		switch f[i] {
		case 'Y':
			num(t.Year(), 1, '0')
		case 'C':
			num(t.Year()/100, 2, '0')
		case 'y':
			num(t.Year()%100, 2, '0')
		case 'G':
			num(isoYear, 1, '0')
		case 'g':
			num(isoYear%100, 2, '0')
		case 'm':
			num(int(t.Month()), 2, '0')
		case 'd':
			num(t.Day(), 2, '0')
		case 'e':
			num(t.Day(), 2, ' ')
		case 'H':
			num(t.Hour(), 2, '0')
		case 'k':
			num(t.Hour(), 2, ' ')
		case 'I':
			num(hour12, 2, '0')
		case 'l':
			num(hour12, 2, ' ')
		case 'M':
			num(t.Minute(), 2, '0')
		case 'S':
			num(t.Second(), 2, '0')
		case 'f':
			num(t.Nanosecond()/1000, 6, '0')
		case 'j':
			num(t.YearDay(), 3, '0')
		case 'U':
			num((t.YearDay()+6-int(t.Weekday()))/7, 2, '0')
		case 'W':
			num((t.YearDay()+6-(int(t.Weekday())+6)%7)/7, 2, '0')
		case 'V':
			num(isoWeek, 2, '0')
		case 'w':
			num(int(t.Weekday()), 1, '0')
		case 'u':
			num((int(t.Weekday())+6)%7+1, 1, '0')
		case 's':
			num(int(t.Unix()), 1, '0')
		case 'p':
			if flag == '#' {
				ampm = strings.ToLower(ampm)
				flag = 0
			}
			text(ampm)
		case 'P':
			b.WriteString(strings.ToLower(ampm))
		case 'b', 'h':
			text(t.Month().String()[:3])
		case 'B':
			text(t.Month().String())
		case 'a':
			text(t.Weekday().String()[:3])
		case 'A':
			text(t.Weekday().String())
		case 'c':
			text(t.Format("Mon Jan _2 15:04:05 2006"))
		case 'x', 'D':
			b.WriteString(t.Format("01/02/06"))
		case 'X', 'T':
			b.WriteString(t.Format("15:04:05"))
		case 'F':
			num(t.Year(), 1, '0')
			b.WriteString(t.Format("-01-02"))
		case 'r':
			b.WriteString(t.Format("03:04:05 PM"))
		case 'R':
			b.WriteString(t.Format("15:04"))
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'Z', 'z':
			// A naive datetime has no zone.
		case '%':
			b.WriteByte('%')
		default:
			b.WriteString(f[start : i+1])
		}
	}
	return b.String(), nil
}
