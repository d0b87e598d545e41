//! Key bindings: strings such as `ctrl+c` parsed into a table that maps keys to actions.

use std::collections::HashMap;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

/// Everything input can ask for. Keys map to these; one `update` applies them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    Quit,
    Pause,
    ZoomIn,
    ZoomOut,
    PanLeft,
    PanRight,
    /// ← : pan in the timeline and gap list, collapse in the tree.
    Left,
    /// → : pan in the timeline and gap list, expand in the tree.
    Right,
    Up,
    Down,
    NextGap,
    PrevGap,
    /// The biggest gap of the top recurring code (What to fix's first row).
    BiggestGap,
    /// The biggest gap of all.
    BiggestOfAll,
    /// Hide or show the one-off gaps (warm-up, code that does not recur) in the gap list.
    HideOneOffs,
    /// Zoom to the selected gap, or walk the selected tree node's gaps.
    Enter,
    ZoomAll,
    FocusNext,
    FocusPrev,
    Invert,
    Export,
    Help,
    ThresholdUp,
    ThresholdDown,
    Sort,
    Clear,
    /// Start searching the call tree's frames.
    Search,
    /// Start typing a text filter for the gap list (htop's `\`).
    FilterGaps,
    /// Stop the profiled program (`gaptop run`): SIGINT, then SIGTERM, then SIGKILL.
    StopProgram,
    /// Gaps of device idle (the default) or of each stream's own idle (HTA's).
    Basis,
    /// Bring back what to fix in the details pane.
    WhatToFix,
    /// On a What-to-fix row: a step replayed with its fix, under the measured one.
    Replay,
    /// Zoom to the next or previous step.
    NextStep,
    PrevStep,
    /// The rank summary in place of the gap list and the call tree (`s` sorts it).
    Ranks,
    /// Show the CPU samples taken during each site's gaps as its subtree.
    CpuSamples,
    /// The call tree by function rather than by line.
    ByFunction,
    /// Hide or show native frames in the call tree.
    HideNative,
    /// The details at full size.
    Details,
    /// Copy the selected stack to the clipboard.
    CopyStack,
    /// Open the selected stack's innermost source line in $EDITOR.
    Edit,
    /// A page up or down, the first or the last row, in the focused list.
    PageUp,
    PageDown,
    Top,
    Bottom,
    /// While searching (not bindable; `search_action` makes them): a typed character, a
    /// deleted one, the next match, and the end of the search.
    SearchChar(char),
    SearchBack,
    SearchNext,
    SearchEnd,
}

impl Action {
    pub const ALL: [(Action, &'static str, &'static str); 45] = [
        (Action::Quit, "quit", "quit (the terminal is restored)"),
        (
            Action::Pause,
            "pause",
            "pause / resume (resume jumps back to now)",
        ),
        (Action::ZoomIn, "zoom_in", "zoom in around the cursor"),
        (Action::ZoomOut, "zoom_out", "zoom out around the cursor"),
        (Action::PanLeft, "pan_left", "pan left"),
        (Action::PanRight, "pan_right", "pan right"),
        (Action::Left, "left", "pan left; collapse in the tree"),
        (Action::Right, "right", "pan right; expand in the tree"),
        (Action::Up, "up", "previous row in the focused pane"),
        (Action::Down, "down", "next row in the focused pane"),
        (
            Action::NextGap,
            "next_gap",
            "next gap (of the tree node, if one is chosen)",
        ),
        (
            Action::PrevGap,
            "prev_gap",
            "previous gap (of the tree node, if one is chosen)",
        ),
        (
            Action::BiggestGap,
            "biggest_gap",
            "the biggest gap of the top recurring code (what to fix's first)",
        ),
        (
            Action::BiggestOfAll,
            "biggest_of_all",
            "the biggest gap in the window, one-offs included",
        ),
        (
            Action::HideOneOffs,
            "hide_one_offs",
            "gap list: hide or show one-offs (warm-up, rare code)",
        ),
        (
            Action::Enter,
            "enter",
            "zoom to the gap; in the tree, walk this node's gaps",
        ),
        (Action::ZoomAll, "zoom_all", "whole capture; follow live"),
        (Action::FocusNext, "focus_next", "focus the next pane"),
        (Action::FocusPrev, "focus_prev", "focus the previous pane"),
        (Action::Invert, "invert", "invert the call tree (bottom-up)"),
        (
            Action::Export,
            "export",
            "export the visible window to Chrome trace JSON (.json.gz)",
        ),
        (Action::Help, "help", "show or hide this help"),
        (
            Action::ThresholdUp,
            "threshold_up",
            "hide more short gaps (raise the threshold)",
        ),
        (
            Action::ThresholdDown,
            "threshold_down",
            "show shorter gaps (lower the threshold)",
        ),
        (
            Action::Sort,
            "sort",
            "sort the gap list by duration or by time",
        ),
        (
            Action::Clear,
            "clear",
            "clear the tree-node filter, close help",
        ),
        (
            Action::Search,
            "search",
            "search the call tree (type; enter: next; esc: done)",
        ),
        (
            Action::StopProgram,
            "stop_program",
            "stop the program (SIGINT; again: SIGTERM, SIGKILL)",
        ),
        (
            Action::Basis,
            "basis",
            "gaps of device idle, or each stream's own (HTA)",
        ),
        (
            Action::WhatToFix,
            "what_to_fix",
            "what to fix, in the details pane (again: the gap)",
        ),
        (
            Action::Replay,
            "replay",
            "what to fix: a step replayed with the row's fix",
        ),
        (
            Action::Ranks,
            "ranks",
            "rank summary: idle, waits, late time and cause a rank",
        ),
        (Action::NextStep, "next_step", "zoom to the next step"),
        (Action::PrevStep, "prev_step", "zoom to the previous step"),
        (
            Action::CpuSamples,
            "cpu_samples",
            "call tree: CPU samples during each site's gaps",
        ),
        (
            Action::ByFunction,
            "by_function",
            "call tree by function (its lines as one) or by line",
        ),
        (
            Action::HideNative,
            "hide_native",
            "call tree: hide or show native (C/C++) frames",
        ),
        (
            Action::Details,
            "details",
            "the details at full size, with the whole stack",
        ),
        (
            Action::CopyStack,
            "copy_stack",
            "copy the selected stack to the clipboard (OSC 52)",
        ),
        (
            Action::Edit,
            "edit",
            "open $EDITOR at the stack's innermost source line",
        ),
        (
            Action::FilterGaps,
            "filter_gaps",
            "filter the gap list by text (cause, kernel, API, stack)",
        ),
        (Action::PageUp, "page_up", "a page up in the focused list"),
        (
            Action::PageDown,
            "page_down",
            "a page down in the focused list",
        ),
        (Action::Top, "top", "the first row of the focused list"),
        (Action::Bottom, "bottom", "the last row of the focused list"),
    ];

    /// A description of at most 28 characters, for the help's columns on an 80-column screen.
    pub fn brief(self) -> &'static str {
        match self {
            Action::Quit => "quit",
            Action::Pause => "pause / resume (to now)",
            Action::ZoomIn => "zoom in at the cursor",
            Action::ZoomOut => "zoom out at the cursor",
            Action::PanLeft => "pan left",
            Action::PanRight => "pan right",
            Action::Left => "pan left; tree: collapse",
            Action::Right => "pan right; tree: expand",
            Action::Up => "previous row",
            Action::Down => "next row",
            Action::NextGap => "next gap (of the tree node)",
            Action::PrevGap => "prev. gap (of the tree node)",
            Action::BiggestGap => "biggest gap, top recurring",
            Action::BiggestOfAll => "the biggest gap of all",
            Action::HideOneOffs => "hide / show one-off gaps",
            Action::Enter => "zoom to gap; tree: its gaps",
            Action::ZoomAll => "whole capture; follow live",
            Action::FocusNext => "next pane",
            Action::FocusPrev => "previous pane",
            Action::Invert => "invert the tree (bottom-up)",
            Action::Export => "export window (.json.gz)",
            Action::Help => "this help",
            Action::ThresholdUp => "hide more short gaps",
            Action::ThresholdDown => "show shorter gaps",
            Action::Sort => "sort gaps: duration / time",
            Action::Clear => "clear node filter; close",
            Action::Search => "search the tree (⏎ next)",
            Action::StopProgram => "stop the program",
            Action::Basis => "device idle / per stream",
            Action::WhatToFix => "what to fix / the gap",
            Action::Replay => "fix row: replay with the fix",
            Action::Ranks => "rank summary (s sorts it)",
            Action::NextStep => "next step",
            Action::PrevStep => "previous step",
            Action::CpuSamples => "tree: CPU samples in gaps",
            Action::ByFunction => "tree by function / line",
            Action::HideNative => "tree: hide native frames",
            Action::Details => "details at full size",
            Action::CopyStack => "copy the stack",
            Action::Edit => "open the source line",
            Action::FilterGaps => "filter the gap list",
            Action::PageUp => "page up",
            Action::PageDown => "page down",
            Action::Top => "first row",
            Action::Bottom => "last row",
            Action::SearchChar(_) | Action::SearchBack | Action::SearchNext | Action::SearchEnd => {
                ""
            }
        }
    }

    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|a| a.0 == self)
            .map(|a| a.1)
            .unwrap_or("?")
    }

    fn from_name(s: &str) -> Option<Action> {
        Self::ALL.iter().find(|a| a.1 == s).map(|a| a.0)
    }
}

/// What a key does while a search of the call tree is being typed: characters go into the
/// query, Backspace takes one out, Enter goes to the next match, Esc ends the search (the match
/// stays selected), Ctrl-C still quits; other keys do nothing.
pub fn search_action(e: &KeyEvent) -> Option<Action> {
    let ctrl = e.modifiers.contains(KeyModifiers::CONTROL);
    match e.code {
        KeyCode::Char('c') if ctrl => Some(Action::Quit),
        KeyCode::Char(c) if !ctrl && !e.modifiers.contains(KeyModifiers::ALT) => {
            Some(Action::SearchChar(c))
        }
        KeyCode::Backspace => Some(Action::SearchBack),
        KeyCode::Enter => Some(Action::SearchNext),
        KeyCode::Esc => Some(Action::SearchEnd),
        _ => None,
    }
}

/// A key as the map stores it: code plus the modifiers that matter (ctrl, alt).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    pub code: KeyCode,
    pub mods: KeyModifiers,
}

impl Key {
    pub fn from_event(e: &KeyEvent) -> Key {
        let mut mods = e.modifiers & (KeyModifiers::CONTROL | KeyModifiers::ALT);
        let code = match e.code {
            KeyCode::Char(c) if mods.contains(KeyModifiers::CONTROL) => {
                KeyCode::Char(c.to_ascii_lowercase())
            }
            KeyCode::BackTab => {
                mods = KeyModifiers::NONE;
                KeyCode::BackTab
            }
            c => c,
        };
        Key { code, mods }
    }

    pub fn parse(s: &str) -> Result<Key, String> {
        let s = s.trim();
        let (mods, rest) = if let Some(r) = s.strip_prefix("ctrl+") {
            (KeyModifiers::CONTROL, r)
        } else if let Some(r) = s.strip_prefix("alt+") {
            (KeyModifiers::ALT, r)
        } else {
            (KeyModifiers::NONE, s)
        };
        let code = match rest {
            "space" => KeyCode::Char(' '),
            "enter" => KeyCode::Enter,
            "esc" => KeyCode::Esc,
            "tab" => KeyCode::Tab,
            "backtab" => KeyCode::BackTab,
            "left" => KeyCode::Left,
            "right" => KeyCode::Right,
            "up" => KeyCode::Up,
            "down" => KeyCode::Down,
            "pageup" => KeyCode::PageUp,
            "pagedown" => KeyCode::PageDown,
            "home" => KeyCode::Home,
            "end" => KeyCode::End,
            r if r.len() > 1
                && r.starts_with('f')
                && r[1..].parse::<u8>().is_ok_and(|n| (1..=12).contains(&n)) =>
            {
                KeyCode::F(r[1..].parse().unwrap_or(1))
            }
            r if r.chars().count() == 1 => {
                let c = r.chars().next().unwrap_or(' ');
                KeyCode::Char(if mods.is_empty() {
                    c
                } else {
                    c.to_ascii_lowercase()
                })
            }
            _ => return Err(format!("unknown key {s:?}")),
        };
        Ok(Key { code, mods })
    }

    pub fn label(&self) -> String {
        let base = match self.code {
            KeyCode::Char(' ') => "space".to_string(),
            KeyCode::Char(c) => c.to_string(),
            KeyCode::Enter => "enter".into(),
            KeyCode::Esc => "esc".into(),
            KeyCode::Tab => "tab".into(),
            KeyCode::BackTab => "shift+tab".into(),
            KeyCode::Left => "←".into(),
            KeyCode::Right => "→".into(),
            KeyCode::Up => "↑".into(),
            KeyCode::Down => "↓".into(),
            KeyCode::PageUp => "pageup".into(),
            KeyCode::PageDown => "pagedown".into(),
            KeyCode::Home => "home".into(),
            KeyCode::End => "end".into(),
            KeyCode::F(n) => format!("F{n}"),
            _ => "?".into(),
        };
        if self.mods.contains(KeyModifiers::CONTROL) {
            format!("ctrl+{base}")
        } else if self.mods.contains(KeyModifiers::ALT) {
            format!("alt+{base}")
        } else {
            base
        }
    }
}

#[derive(Clone, Debug)]
pub struct KeyMap {
    map: HashMap<Key, Action>,
}

pub const DEFAULT_KEYS: &str = include_str!("../../assets/keys.conf");

impl Default for KeyMap {
    fn default() -> Self {
        KeyMap::parse(DEFAULT_KEYS).expect("the default key map parses")
    }
}

impl KeyMap {
    /// Parses `action = key, key` lines. A key bound to two actions is an error.
    pub fn parse(text: &str) -> Result<KeyMap, String> {
        let mut map = HashMap::new();
        for (no, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (name, keys) = line
                .split_once('=')
                .ok_or_else(|| format!("line {}: expected `action = keys`", no + 1))?;
            let action = Action::from_name(name.trim())
                .ok_or_else(|| format!("line {}: unknown action {:?}", no + 1, name.trim()))?;
            // Keys are separated by commas; a "," key is written as "comma".
            for k in keys.split(',') {
                let k = if k.trim() == "comma" { "," } else { k };
                if k.trim().is_empty() {
                    continue;
                }
                let key = Key::parse(k).map_err(|e| format!("line {}: {e}", no + 1))?;
                if let Some(prev) = map.insert(key, action) {
                    if prev != action {
                        return Err(format!(
                            "line {}: key {} is bound to both {} and {}",
                            no + 1,
                            key.label(),
                            prev.name(),
                            action.name()
                        ));
                    }
                }
            }
        }
        Ok(KeyMap { map })
    }

    /// The default map with a user file's lines applied over it (an action named in the file
    /// loses its default keys).
    pub fn with_overrides(text: &str) -> Result<KeyMap, String> {
        let user = KeyMap::parse(text)?;
        let overridden: std::collections::HashSet<Action> = user.map.values().copied().collect();
        let mut map: HashMap<Key, Action> = KeyMap::default()
            .map
            .into_iter()
            .filter(|(_, a)| !overridden.contains(a))
            .collect();
        for (k, a) in user.map {
            if let Some(prev) = map.insert(k, a) {
                if prev != a {
                    return Err(format!(
                        "key {} is bound to both {} and {}",
                        k.label(),
                        prev.name(),
                        a.name()
                    ));
                }
            }
        }
        Ok(KeyMap { map })
    }

    pub fn action(&self, e: &KeyEvent) -> Option<Action> {
        self.map.get(&Key::from_event(e)).copied()
    }

    /// Keys bound to an action, for the help overlay.
    pub fn keys_for(&self, a: Action) -> Vec<String> {
        let mut v: Vec<String> = self
            .map
            .iter()
            .filter(|(_, x)| **x == a)
            .map(|(k, _)| k.label())
            .collect();
        v.sort();
        v
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_bindable_action_has_a_brief_that_fits_an_80_column_help() {
        for (a, name, what) in Action::ALL {
            let b = a.brief();
            assert!(!b.is_empty() && b.chars().count() <= 28, "{name}: {b:?}");
            assert!(
                b.chars().count() <= what.chars().count(),
                "{name}: brief longer"
            );
        }
    }

    use super::*;

    fn ev(code: KeyCode, mods: KeyModifiers) -> KeyEvent {
        KeyEvent::new(code, mods)
    }

    #[test]
    fn default_bindings() {
        let m = KeyMap::default();
        let cases = [
            (KeyCode::Char('q'), KeyModifiers::NONE, Some(Action::Quit)),
            (
                KeyCode::Char('c'),
                KeyModifiers::CONTROL,
                Some(Action::Quit),
            ),
            (KeyCode::Char(' '), KeyModifiers::NONE, Some(Action::Pause)),
            (KeyCode::Char('+'), KeyModifiers::NONE, Some(Action::ZoomIn)),
            (KeyCode::Char('='), KeyModifiers::NONE, Some(Action::ZoomIn)),
            (
                KeyCode::Char('-'),
                KeyModifiers::NONE,
                Some(Action::ZoomOut),
            ),
            (
                KeyCode::Char('n'),
                KeyModifiers::NONE,
                Some(Action::NextGap),
            ),
            (
                KeyCode::Char('N'),
                KeyModifiers::SHIFT,
                Some(Action::PrevGap),
            ),
            (
                KeyCode::Char('0'),
                KeyModifiers::NONE,
                Some(Action::ZoomAll),
            ),
            (KeyCode::Tab, KeyModifiers::NONE, Some(Action::FocusNext)),
            (
                KeyCode::BackTab,
                KeyModifiers::SHIFT,
                Some(Action::FocusPrev),
            ),
            (KeyCode::Left, KeyModifiers::NONE, Some(Action::Left)),
            (KeyCode::Char('?'), KeyModifiers::NONE, Some(Action::Help)),
            (KeyCode::Char('R'), KeyModifiers::SHIFT, Some(Action::Ranks)),
            (KeyCode::Char('x'), KeyModifiers::NONE, None),
            (KeyCode::Char('q'), KeyModifiers::CONTROL, None),
        ];
        for (code, mods, want) in cases {
            assert_eq!(m.action(&ev(code, mods)), want, "{code:?} {mods:?}");
        }
        // Every action has a key.
        for (a, name, _) in Action::ALL {
            assert!(!m.keys_for(a).is_empty(), "{name} has no key");
        }
    }

    #[test]
    fn duplicates_and_typos_are_errors() {
        assert!(KeyMap::parse("quit = q\npause = q")
            .unwrap_err()
            .contains("both"));
        assert!(KeyMap::parse("jump = q")
            .unwrap_err()
            .contains("unknown action"));
        assert!(KeyMap::parse("quit = ctrl+bogus")
            .unwrap_err()
            .contains("unknown key"));
        assert!(KeyMap::parse("quit q").unwrap_err().contains("expected"));
    }

    #[test]
    fn overrides_replace_only_named_actions() {
        let m = KeyMap::with_overrides("quit = x").unwrap();
        assert_eq!(
            m.action(&ev(KeyCode::Char('x'), KeyModifiers::NONE)),
            Some(Action::Quit)
        );
        assert_eq!(m.action(&ev(KeyCode::Char('q'), KeyModifiers::NONE)), None);
        assert_eq!(
            m.action(&ev(KeyCode::Char(' '), KeyModifiers::NONE)),
            Some(Action::Pause)
        );
        assert!(KeyMap::with_overrides("quit = n").is_err());
    }

    #[test]
    fn a_search_takes_keys_as_its_text() {
        use crossterm::event::{KeyCode as C, KeyEvent, KeyModifiers as M};
        let k = |code, mods| search_action(&KeyEvent::new(code, mods));
        assert_eq!(k(C::Char('q'), M::NONE), Some(Action::SearchChar('q')));
        assert_eq!(k(C::Char('Q'), M::SHIFT), Some(Action::SearchChar('Q')));
        assert_eq!(k(C::Char('/'), M::NONE), Some(Action::SearchChar('/')));
        assert_eq!(k(C::Backspace, M::NONE), Some(Action::SearchBack));
        assert_eq!(k(C::Enter, M::NONE), Some(Action::SearchNext));
        assert_eq!(k(C::Esc, M::NONE), Some(Action::SearchEnd));
        assert_eq!(k(C::Char('c'), M::CONTROL), Some(Action::Quit));
        assert_eq!(k(C::Char('x'), M::ALT), None);
        assert_eq!(k(C::Down, M::NONE), None);
        // `/` starts one by default.
        let m = KeyMap::default();
        assert_eq!(
            m.action(&KeyEvent::new(C::Char('/'), M::NONE)),
            Some(Action::Search)
        );
    }
}
