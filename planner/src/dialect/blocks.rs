//! The query-block stage of the dialect, on the parsed statement: every query block (the
//! outermost query, each subquery, each CTE body) finds its window key and binds its window
//! bounds.
//!
//! A block's window is a `tumble(…)`, `hop(…)` or `session(…)` call in its GROUP BY (written
//! so, or put there by the clause stage), or a window table function in its FROM
//! (`TUMBLE(t, DESCRIPTOR(ts), size)`, `HOP(t, DESCRIPTOR(ts), slide, size)`), which becomes
//! the table `t` with the window key in the GROUP BY in place of its `window_start` /
//! `window_end` items. In that block, unqualified `window_start` and `window_end` (also
//! `_WINDOW_START` / `_WINDOW_END`) then stand for the key and for the window's end (the key
//! plus its size; for a session, its last event time plus the gap): DataFusion binds the key
//! to the aggregation's window column. A bound inside a nested query is that query's own,
//! and a quoted, qualified or aliased name is left alone.

use std::ops::ControlFlow;

use datafusion::common::{DataFusionError, Result, plan_err};
use datafusion::sql::sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, FunctionArguments, GroupByExpr, Ident, ObjectName,
    ObjectNamePart, Query, Select, SelectItem, SetExpr, Statement, TableFactor, VisitMut,
    VisitorMut,
};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::Span;

use super::vocabulary::WindowKind;

/// A block's window: its key call and the expressions its bounds stand for.
struct Window {
    kind: WindowKind,
    /// The key, e.g. `tumble(trade_time, INTERVAL '1' MINUTE)`.
    call: Expr,
    /// What `window_end` stands for.
    end: Expr,
}

impl Window {
    fn new(kind: WindowKind, call: &str, length: &Expr, time: &Expr) -> Result<Self> {
        let end = match kind {
            WindowKind::Session => format!("session_end(max({time}), {length})"),
            _ => format!("({call} + {length})"),
        };
        Ok(Self {
            kind,
            call: expression(call)?,
            end: expression(&end)?,
        })
    }
}

/// Binds the windows of every query block of `statement`. Returns the first window's kind
/// (the outermost block's, if it has one) and whether anything changed.
pub(super) fn bind_windows(statement: &mut Statement) -> Result<(Option<WindowKind>, bool)> {
    let mut binder = Binder::default();
    match statement.visit(&mut binder) {
        ControlFlow::Break(error) => Err(error),
        ControlFlow::Continue(()) => Ok((binder.first, binder.changed)),
    }
}

#[derive(Default)]
struct Binder {
    first: Option<WindowKind>,
    changed: bool,
}

impl VisitorMut for Binder {
    type Break = DataFusionError;

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<DataFusionError> {
        match self.bind_query(query) {
            Ok(()) => ControlFlow::Continue(()),
            Err(error) => ControlFlow::Break(error),
        }
    }
}

impl Binder {
    /// Binds the block(s) of `query`'s own body; nested queries are visited on their own.
    fn bind_query(&mut self, query: &mut Query) -> Result<()> {
        match query.body.as_mut() {
            SetExpr::Select(select) => {
                if let Some(window) = self.bind_select(select)? {
                    // ORDER BY belongs to the block.
                    if let Some(order_by) = &mut query.order_by {
                        self.changed |= replace_bounds(order_by, &window);
                    }
                }
                Ok(())
            }
            body => self.bind_set_operation(body),
        }
    }

    /// The selects of a UNION / INTERSECT / EXCEPT, each a block.
    fn bind_set_operation(&mut self, body: &mut SetExpr) -> Result<()> {
        match body {
            SetExpr::Select(select) => self.bind_select(select).map(|_| ()),
            SetExpr::SetOperation { left, right, .. } => {
                self.bind_set_operation(left)?;
                self.bind_set_operation(right)
            }
            _ => Ok(()),
        }
    }

    /// Finds `select`'s window and binds its bounds; returns the window.
    fn bind_select(&mut self, select: &mut Select) -> Result<Option<Window>> {
        let table_function = self.take_window_table(select)?;
        let GroupByExpr::Expressions(keys, _) = &mut select.group_by else {
            return Ok(None);
        };
        let window = match table_function {
            Some(TableWindow {
                window,
                partition_keys,
                at,
            }) => {
                if let Some(partition_keys) = partition_keys {
                    check_session_keys(&partition_keys, keys, at)?;
                }
                Some(window)
            }
            None => keys.iter().find_map(window_call).transpose()?,
        };
        let Some(window) = window else {
            return Ok(None);
        };
        self.first.get_or_insert(window.kind);
        // Bounds named in the GROUP BY (`GROUP BY window_start, window_end, k`) are the
        // window key: the first becomes the key unless the GROUP BY has it already.
        let mut has_key = keys.iter().any(|key| window_call(key).is_some());
        let mut grouped = Vec::with_capacity(keys.len() + 1);
        for key in keys.drain(..) {
            if bound(&key).is_some() {
                self.changed = true;
                if !has_key {
                    grouped.push(window.call.clone());
                    has_key = true;
                }
            } else {
                grouped.push(key);
            }
        }
        *keys = grouped;
        for key in keys.iter_mut() {
            self.changed |= replace_bounds(key, &window);
        }
        for item in &mut select.projection {
            self.changed |= match item {
                SelectItem::UnnamedExpr(expr) if bound(expr).is_some() => {
                    // A bare bound keeps its name as the output column's.
                    let Expr::Identifier(name) = expr.clone() else {
                        continue;
                    };
                    let is_end = bound(expr) == Some(true);
                    let value = if is_end { &window.end } else { &window.call };
                    *item = SelectItem::ExprWithAlias {
                        expr: value.clone(),
                        alias: name,
                    };
                    true
                }
                SelectItem::UnnamedExpr(expr) | SelectItem::ExprWithAlias { expr, .. } => {
                    replace_bounds(expr, &window)
                }
                _ => false,
            };
        }
        for clause in [
            &mut select.selection,
            &mut select.having,
            &mut select.qualify,
        ]
        .into_iter()
        .flatten()
        {
            self.changed |= replace_bounds(clause, &window);
        }
        Ok(Some(window))
    }

    /// A window table function as `select`'s first relation, replaced by its table; with a
    /// session's PARTITION BY keys, if it names them.
    fn take_window_table(&mut self, select: &mut Select) -> Result<Option<TableWindow>> {
        let Some(TableFactor::Table { name, args, .. }) =
            select.from.first_mut().map(|from| &mut from.relation)
        else {
            return Ok(None);
        };
        let (kind, expected) = match single_name(name).map(str::to_ascii_lowercase).as_deref() {
            Some("tumble") => (WindowKind::Tumble, 3..=3),
            Some("hop") => (WindowKind::Hop, 4..=4),
            Some("session") => (WindowKind::Session, 3..=4),
            Some("cumulate") if args.is_some() => {
                return plan_err!(
                    "CUMULATE windows are not supported (at {}): use TUMBLE, HOP or SESSION",
                    position(name_span(name))
                );
            }
            _ => return Ok(None),
        };
        let Some(arguments) = args.as_ref().map(|a| &a.args) else {
            return Ok(None);
        };
        let at = name_span(name);
        let malformed = || {
            let expected = match kind {
                WindowKind::Tumble => {
                    "TUMBLE(TABLE t, DESCRIPTOR(ts), size) or TUMBLE(DATA => TABLE t, TIMECOL => DESCRIPTOR(ts), SIZE => size)"
                }
                WindowKind::Hop => {
                    "HOP(TABLE t, DESCRIPTOR(ts), slide, size) or HOP(DATA => TABLE t, TIMECOL => DESCRIPTOR(ts), SLIDE => slide, SIZE => size)"
                }
                WindowKind::Session => {
                    "SESSION(TABLE t [PARTITION BY k, …], DESCRIPTOR(ts), gap) or SESSION(DATA => TABLE t [PARTITION BY k, …], TIMECOL => DESCRIPTOR(ts), GAP => gap)"
                }
            };
            plan_err!(
                "malformed window table function at {}: expected {expected}",
                position(at)
            )
        };
        let Some(arguments) = positional(kind, arguments, at)? else {
            return malformed();
        };
        if !expected.contains(&arguments.len()) {
            return malformed();
        }
        let table = match arguments[0] {
            Expr::Identifier(ident) => ObjectName::from(vec![ident.clone()]),
            Expr::CompoundIdentifier(parts) => ObjectName::from(parts.clone()),
            _ => return malformed(),
        };
        let time = match descriptor(arguments[1]).as_deref() {
            Some([time]) => *time,
            _ => return malformed(),
        };
        let (window, partition_keys) = match kind {
            WindowKind::Tumble => (
                Window::new(
                    kind,
                    &format!("tumble({time}, {})", arguments[2]),
                    arguments[2],
                    time,
                )?,
                None,
            ),
            WindowKind::Hop => (
                Window::new(
                    kind,
                    &format!("hop({time}, {}, {})", arguments[2], arguments[3]),
                    arguments[3],
                    time,
                )?,
                None,
            ),
            WindowKind::Session => {
                let keys = match arguments.get(3) {
                    Some(keys) => match descriptor(keys) {
                        Some(keys) => keys.into_iter().cloned().collect(),
                        None => return malformed(),
                    },
                    None => Vec::new(),
                };
                let call = format!("session({time}, {})", arguments[2]);
                (Window::new(kind, &call, arguments[2], time)?, Some(keys))
            }
        };
        *name = table;
        *args = None;
        self.changed = true;
        Ok(Some(TableWindow {
            window,
            partition_keys,
            at,
        }))
    }
}

/// A window table function's window, with a session's PARTITION BY keys (empty when it
/// names none; `None` for tumbling and hopping windows) and where it was written.
struct TableWindow {
    window: Window,
    partition_keys: Option<Vec<Expr>>,
    at: Span,
}

/// A session table function makes a session per PARTITION BY key (of all the table's
/// records without one), and Freshet a session per GROUP BY key: the GROUP BY keys beside
/// the window bounds must be the PARTITION BY keys.
fn check_session_keys(partition_keys: &[Expr], group_keys: &[Expr], at: Span) -> Result<()> {
    let partitioned = sorted_names(partition_keys.iter());
    let grouped = sorted_names(group_keys.iter().filter(|key| bound(key).is_none()));
    if partitioned == grouped {
        return Ok(());
    }
    plan_err!(
        "SESSION window table function at {}: a session is made per PARTITION BY key, and \
         GROUP BY must group by exactly those keys beside window_start and window_end \
         (PARTITION BY {}; GROUP BY {})",
        position(at),
        listed(&partitioned),
        listed(&grouped)
    )
}

fn sorted_names<'a>(keys: impl Iterator<Item = &'a Expr>) -> Vec<String> {
    let mut names: Vec<String> = keys.map(key_name).collect();
    names.sort();
    names
}

/// A key as the session check compares it: a column by its name, lowercased unless quoted.
fn key_name(key: &Expr) -> String {
    let ident = match key {
        Expr::Identifier(ident) => Some(ident),
        Expr::CompoundIdentifier(parts) => parts.last(),
        _ => None,
    };
    match ident {
        Some(ident) if ident.quote_style.is_none() => ident.value.to_ascii_lowercase(),
        Some(ident) => ident.value.clone(),
        None => key.to_string(),
    }
}

fn listed(names: &[String]) -> String {
    match names {
        [] => "nothing".to_string(),
        names => names.join(", "),
    }
}

/// The window of a `tumble(ts, size)`, `hop(ts, slide, size)` or `session(ts, gap)` call;
/// `None` for any other expression, an error for a call missing its arguments.
fn window_call(expr: &Expr) -> Option<Result<Window>> {
    let Expr::Function(function) = expr else {
        return None;
    };
    let kind = match single_name(&function.name)?.to_ascii_lowercase().as_str() {
        "tumble" => WindowKind::Tumble,
        "hop" => WindowKind::Hop,
        "session" => WindowKind::Session,
        _ => return None,
    };
    let arguments: Vec<&Expr> = match &function.args {
        FunctionArguments::List(list) => list.args.iter().filter_map(unnamed).collect(),
        _ => Vec::new(),
    };
    let length = match kind {
        WindowKind::Hop => arguments.get(2),
        _ => arguments.get(1),
    };
    let (Some(time), Some(length)) = (arguments.first(), length) else {
        let name = single_name(&function.name).unwrap_or_default();
        return Some(plan_err!(
            "malformed {name}() window at {}: expected {}",
            position(name_span(&function.name)),
            match kind {
                WindowKind::Tumble => "tumble(ts, size)",
                WindowKind::Hop => "hop(ts, slide, size)",
                WindowKind::Session => "session(ts, gap)",
            }
        ));
    };
    Some(Window::new(kind, &expr.to_string(), length, time))
}

/// Whether `expr` is a window bound: `Some(false)` for `window_start`, `Some(true)` for
/// `window_end` (unquoted, unqualified, with or without leading underscores).
fn bound(expr: &Expr) -> Option<bool> {
    let Expr::Identifier(ident) = expr else {
        return None;
    };
    if ident.quote_style.is_some() {
        return None;
    }
    let name = ident.value.to_ascii_lowercase();
    match name.trim_start_matches('_') {
        "window_start" => Some(false),
        "window_end" => Some(true),
        _ => None,
    }
}

/// Whether `expr` is Flink's group window auxiliary function for a window of `kind`:
/// `Some(false)` for `TUMBLE_START(ts, size)` (`HOP_START`, `SESSION_START`), `Some(true)`
/// for `TUMBLE_END` (`HOP_END`, `SESSION_END`), called on the window's time column.
/// Freshet's own `session_end(max(ts), gap)`, an aggregate, is not one.
fn auxiliary_bound(expr: &Expr, kind: WindowKind) -> Option<bool> {
    let Expr::Function(function) = expr else {
        return None;
    };
    let name = single_name(&function.name)?.to_ascii_lowercase();
    let (prefix, is_end) = match name.rsplit_once('_')? {
        (prefix, "start") => (prefix, false),
        (prefix, "end") => (prefix, true),
        _ => return None,
    };
    let named = match prefix {
        "tumble" => WindowKind::Tumble,
        "hop" => WindowKind::Hop,
        "session" => WindowKind::Session,
        _ => return None,
    };
    let FunctionArguments::List(list) = &function.args else {
        return None;
    };
    let on_a_column = matches!(
        list.args.first().and_then(unnamed),
        Some(Expr::Identifier(_) | Expr::CompoundIdentifier(_))
    );
    (named == kind && on_a_column).then_some(is_end)
}

/// Replaces the window bounds in `node` (not in nested queries, which have their own);
/// returns whether any was replaced.
fn replace_bounds<T: VisitMut>(node: &mut T, window: &Window) -> bool {
    let mut replacer = BoundReplacer {
        window,
        nested: 0,
        replaced: false,
    };
    let _ = node.visit(&mut replacer);
    replacer.replaced
}

struct BoundReplacer<'a> {
    window: &'a Window,
    /// How many queries deep the visit is (bounds are replaced at 0 only).
    nested: usize,
    replaced: bool,
}

impl VisitorMut for BoundReplacer<'_> {
    type Break = ();

    fn pre_visit_query(&mut self, _: &mut Query) -> ControlFlow<()> {
        self.nested += 1;
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, _: &mut Query) -> ControlFlow<()> {
        self.nested -= 1;
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if self.nested == 0
            && let Some(is_end) = bound(expr).or_else(|| auxiliary_bound(expr, self.window.kind))
        {
            *expr = if is_end {
                self.window.end.clone()
            } else {
                self.window.call.clone()
            };
            self.replaced = true;
        }
        ControlFlow::Continue(())
    }
}

/// The arguments of a window table function in their positional order: as written, or by
/// Flink's names (`DATA`, `TIMECOL`, then `SIZE`; `SLIDE`, `SIZE`; or `GAP`) after the
/// positional ones; a session's keys, moved to a last unnamed `DESCRIPTOR`, stay last.
/// `None` when an argument is missing, repeated or unknown.
fn positional(kind: WindowKind, arguments: &[FunctionArg], at: Span) -> Result<Option<Vec<&Expr>>> {
    let names: &[&str] = match kind {
        WindowKind::Tumble => &["data", "timecol", "size"],
        WindowKind::Hop => &["data", "timecol", "slide", "size"],
        WindowKind::Session => &["data", "timecol", "gap"],
    };
    let mut slots: Vec<Option<&Expr>> = vec![None; names.len()];
    let (mut filled, mut named, mut trailing) = (0, false, Vec::new());
    for argument in arguments {
        match argument {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(expr)) if !named => {
                match slots.get_mut(filled) {
                    Some(slot) => *slot = Some(expr),
                    None => trailing.push(expr),
                }
                filled += 1;
            }
            FunctionArg::Unnamed(FunctionArgExpr::Expr(expr)) => trailing.push(expr),
            FunctionArg::Named {
                name,
                arg: FunctionArgExpr::Expr(expr),
                ..
            } => {
                named = true;
                let wanted = name.value.to_ascii_lowercase();
                if wanted == "offset" {
                    return plan_err!(
                        "the OFFSET of a window table function is not supported (at {})",
                        position(at)
                    );
                }
                match names.iter().position(|n| *n == wanted) {
                    Some(slot) if slots[slot].is_none() => slots[slot] = Some(expr),
                    _ => return Ok(None),
                }
            }
            _ => return Ok(None),
        }
    }
    if !named {
        return Ok(Some(slots.into_iter().flatten().chain(trailing).collect()));
    }
    let Some(mut ordered) = slots.into_iter().collect::<Option<Vec<&Expr>>>() else {
        return Ok(None);
    };
    ordered.extend(trailing);
    Ok(Some(ordered))
}

/// The expression of an unnamed argument.
fn unnamed(argument: &FunctionArg) -> Option<&Expr> {
    match argument {
        FunctionArg::Unnamed(FunctionArgExpr::Expr(expr)) => Some(expr),
        _ => None,
    }
}

/// The columns of `DESCRIPTOR(a, …)`.
fn descriptor(expr: &Expr) -> Option<Vec<&Expr>> {
    let Expr::Function(function) = expr else {
        return None;
    };
    if !single_name(&function.name)?.eq_ignore_ascii_case("descriptor") {
        return None;
    }
    match &function.args {
        FunctionArguments::List(list) if !list.args.is_empty() => {
            list.args.iter().map(unnamed).collect()
        }
        _ => None,
    }
}

/// The name of a one-part, unquoted object name.
fn single_name(name: &ObjectName) -> Option<&str> {
    match name.0.as_slice() {
        [
            ObjectNamePart::Identifier(Ident {
                value,
                quote_style: None,
                ..
            }),
        ] => Some(value),
        _ => None,
    }
}

/// Where `name` was written.
fn name_span(name: &ObjectName) -> Span {
    match name.0.first() {
        Some(ObjectNamePart::Identifier(ident)) => ident.span,
        _ => Span::empty(),
    }
}

/// `line L, column C`, as the clause stage says it.
fn position(span: Span) -> String {
    format!("line {}, column {}", span.start.line, span.start.column)
}

/// `sql` as an expression.
fn expression(sql: &str) -> Result<Expr> {
    Parser::new(&GenericDialect {})
        .try_with_sql(sql)
        .and_then(|mut parser| parser.parse_expr())
        .map_err(|e| DataFusionError::SQL(Box::new(e), None))
}
