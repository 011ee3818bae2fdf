//! How deeply a statement nests, estimated from its tokens before it is parsed.
//!
//! A chain of binary operators (`1+1+…+1`, `a = 1 OR a = 2 OR …`) or of set operations
//! (`SELECT … UNION ALL SELECT … UNION ALL …`) parses into a tree as deep as the chain is long,
//! and planning, optimizing, printing and dropping that tree recurse once per level: a few
//! hundred levels are enough to overflow a 2 MiB thread stack, which aborts the whole process.
//! The SQL parser's own recursion limit bounds parentheses, function calls and subqueries, but
//! not chains, which it parses in a loop. So each statement's depth is estimated here, from its
//! tokens alone (flat, no recursion), and a statement deeper than the session's
//! `accelsql.max_statement_depth` is refused with 54001 before anything recursive sees it.
//!
//! The estimate is an upper bound of the parsed tree's depth: every operator of a chain counts
//! one level (a chain of `=` inside an `OR` chain counts both), every bracket one more, and the
//! levels of all enclosing brackets add up.

use super::tokens::written_tokens;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::Token;

/// The levels of one bracket: its operator chain (reset at a `,` or a clause keyword) and its
/// chain of set operations (which clause keywords do not reset: each `UNION` nests the ones
/// before it).
#[derive(Debug, Default, Clone, Copy)]
struct Level {
    operators: usize,
    sets: usize,
}

impl Level {
    fn depth(self) -> usize {
        self.operators + self.sets
    }
}

/// The estimated nesting depth of `text` (one or more statements; the deepest counts), or
/// `None` when its tokens cannot be read (the parser then reports the error).
pub(crate) fn statement_depth(text: &str) -> Option<usize> {
    let tokens = written_tokens(text)?;
    // The enclosing brackets' levels, and the depth they add up to.
    let mut outer: Vec<Level> = Vec::new();
    let mut base = 0usize;
    let mut level = Level::default();
    let mut deepest = 0usize;
    for token in &tokens {
        match token {
            Token::LParen | Token::LBracket | Token::LBrace => {
                outer.push(level);
                base += level.depth() + 1;
                level = Level::default();
            }
            Token::RParen | Token::RBracket | Token::RBrace => {
                if let Some(enclosing) = outer.pop() {
                    base -= enclosing.depth() + 1;
                    level = enclosing;
                }
            }
            Token::Comma => level.operators = 0,
            Token::SemiColon => level = Level::default(),
            Token::Word(word) => match word.keyword {
                Keyword::UNION | Keyword::INTERSECT | Keyword::EXCEPT | Keyword::MINUS => {
                    level.sets += 1;
                    level.operators = 0;
                }
                Keyword::AND
                | Keyword::OR
                | Keyword::XOR
                | Keyword::NOT
                | Keyword::IS
                | Keyword::LIKE
                | Keyword::ILIKE
                | Keyword::IN
                | Keyword::BETWEEN
                | Keyword::JOIN => level.operators += 1,
                Keyword::SELECT
                | Keyword::FROM
                | Keyword::WHERE
                | Keyword::GROUP
                | Keyword::HAVING
                | Keyword::QUALIFY
                | Keyword::ORDER
                | Keyword::LIMIT
                | Keyword::OFFSET
                | Keyword::WHEN
                | Keyword::THEN
                | Keyword::ELSE
                | Keyword::END
                | Keyword::SET
                | Keyword::VALUES
                | Keyword::RETURNING => level.operators = 0,
                _ => {}
            },
            Token::Plus
            | Token::Minus
            | Token::Mul
            | Token::Div
            | Token::DuckIntDiv
            | Token::Mod
            | Token::StringConcat
            | Token::Eq
            | Token::DoubleEq
            | Token::Neq
            | Token::Lt
            | Token::Gt
            | Token::LtEq
            | Token::GtEq
            | Token::Spaceship
            | Token::Ampersand
            | Token::Pipe
            | Token::Caret
            | Token::ShiftLeft
            | Token::ShiftRight
            | Token::Arrow
            | Token::LongArrow
            | Token::HashArrow
            | Token::HashLongArrow
            | Token::DoubleColon
            | Token::Tilde
            | Token::TildeAsterisk
            | Token::ExclamationMarkTilde
            | Token::ExclamationMarkTildeAsterisk
            | Token::ExclamationMark => level.operators += 1,
            _ => {}
        }
        deepest = deepest.max(base + level.depth());
    }
    Some(deepest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(term: &str, op: &str, n: usize) -> String {
        vec![term; n].join(op)
    }

    #[test]
    fn flat_statements_are_shallow() {
        assert_eq!(statement_depth("SELECT 1"), Some(0));
        assert_eq!(
            statement_depth("SELECT a, b, c FROM t WHERE a = 1"),
            Some(1)
        );
        // Many columns or list items are wide, not deep.
        let wide = format!("SELECT {} FROM t", chain("a + 1", ", ", 5_000));
        assert_eq!(statement_depth(&wide), Some(1));
        let list = format!("SELECT * FROM t WHERE a IN ({})", chain("1", ", ", 5_000));
        assert_eq!(statement_depth(&list), Some(2));
    }

    #[test]
    fn chains_count_one_level_per_operator() {
        let sum = format!("SELECT {}", chain("1", " + ", 401));
        assert_eq!(statement_depth(&sum), Some(400));
        let ors = format!("SELECT * FROM t WHERE {}", chain("a = 1", " OR ", 300));
        assert_eq!(statement_depth(&ors), Some(599));
        let unions = chain("SELECT 1 + 1", " UNION ALL ", 100);
        assert_eq!(statement_depth(&unions), Some(100));
    }

    #[test]
    fn brackets_add_up_the_levels_around_them() {
        let nested = format!("SELECT 1 + ({})", chain("2", " * ", 11));
        assert_eq!(statement_depth(&nested), Some(1 + 1 + 10));
        let subqueries = "SELECT (SELECT (SELECT 1 + 1))";
        assert_eq!(statement_depth(subqueries), Some(3));
        // A closed bracket's levels no longer count.
        assert_eq!(statement_depth("SELECT (1 + 1 + 1), 2"), Some(3));
    }

    #[test]
    fn operators_in_strings_and_comments_do_not_count() {
        let text = format!("SELECT '{}' -- {}", "+".repeat(10_000), "+".repeat(10_000));
        assert_eq!(statement_depth(&text), Some(0));
    }

    #[test]
    fn unreadable_text_has_no_depth() {
        assert_eq!(statement_depth("SELECT 'unterminated"), None);
    }
}
