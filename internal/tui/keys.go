package tui

import (
	"slices"

	"charm.land/lipgloss/v2"
)

// Binding is one action's keys and its help text.
type Binding struct {
	Keys []string
	// Label is how the help shows the keys, Short names the action in the
	// footer and Help says what it does.
	Label, Short, Help string
}

// Has reports whether key (as tea.KeyPressMsg.String spells it) triggers b.
func (b Binding) Has(key string) bool { return slices.Contains(b.Keys, key) }

// KeyMap is every binding top knows.
type KeyMap struct {
	Up, Down, Top, Bottom Binding
	NextView, PrevView    Binding
	Filter, Sort, Detail  Binding
	Back, Pause, Help     Binding
	Quit                  Binding
}

// DefaultKeyMap returns top's keys.
func DefaultKeyMap() KeyMap {
	return KeyMap{
		Up:       Binding{[]string{"up", "k"}, "↑/k", "up", "move up"},
		Down:     Binding{[]string{"down", "j"}, "↓/j", "down", "move down"},
		Top:      Binding{[]string{"home", "g"}, "g", "first", "first row"},
		Bottom:   Binding{[]string{"end", "G"}, "G", "last", "last row"},
		NextView: Binding{[]string{"tab", "right", "l"}, "tab", "view", "next view"},
		PrevView: Binding{[]string{"shift+tab", "left", "h"}, "S-tab", "back", "previous view"},
		Filter:   Binding{[]string{"/"}, "/", "filter", "filter by model, namespace, role or id"},
		Sort:     Binding{[]string{"s"}, "s", "sort", "cycle sort: load, id, age, selections"},
		Detail:   Binding{[]string{"enter"}, "enter", "detail", "worker detail"},
		Back:     Binding{[]string{"esc"}, "esc", "close", "close detail, clear filter"},
		Pause:    Binding{[]string{"p"}, "p", "pause", "pause polling"},
		Help:     Binding{[]string{"?"}, "?", "help", "help"},
		Quit:     Binding{[]string{"q", "ctrl+c"}, "q", "quit", "quit"},
	}
}

// all lists the bindings in help order.
func (k KeyMap) all() []Binding {
	return []Binding{k.Up, k.Down, k.Top, k.Bottom, k.NextView, k.PrevView, k.Filter, k.Sort, k.Detail, k.Back, k.Pause, k.Help, k.Quit}
}

// Styles are top's colours; without colour every style renders plain text.
type Styles struct {
	Title, Tab, ActiveTab, Header, Group, Cursor lipgloss.Style
	Fresh, Quiet, Stale, None, Banner, Dim, Bar  lipgloss.Style
	Bad, Plain                                   lipgloss.Style
}

// NewStyles builds the styles, coloured or plain.
func NewStyles(color bool) Styles {
	if !color {
		p := lipgloss.NewStyle()
		return Styles{p, p, p, p, p, p, p, p, p, p, p, p, p, p, p}
	}
	s := lipgloss.NewStyle
	return Styles{
		Title:     s().Bold(true),
		Tab:       s().Foreground(lipgloss.Color("245")),
		ActiveTab: s().Bold(true).Foreground(lipgloss.Color("39")),
		Header:    s().Bold(true).Foreground(lipgloss.Color("250")),
		Group:     s().Bold(true).Foreground(lipgloss.Color("111")),
		Cursor:    s().Reverse(true),
		Fresh:     s().Foreground(lipgloss.Color("42")),
		Quiet:     s().Foreground(lipgloss.Color("244")),
		Stale:     s().Foreground(lipgloss.Color("208")),
		None:      s().Foreground(lipgloss.Color("240")),
		Banner:    s().Bold(true).Foreground(lipgloss.Color("231")).Background(lipgloss.Color("160")),
		Dim:       s().Foreground(lipgloss.Color("244")),
		Bar:       s().Foreground(lipgloss.Color("39")),
		Bad:       s().Foreground(lipgloss.Color("203")),
		Plain:     s(),
	}
}
