//! Function lengths: free functions, inherent and trait-impl methods, trait
//! methods with a default body, nested functions; `#[cfg(test)]` items skipped.

use syn::visit::Visit;

use super::source::is_cfg_test;

/// A function over the limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LongFn {
    pub name: String,
    /// The line of its `fn` keyword.
    pub line: usize,
    /// From the `fn` keyword's line to the closing brace's, both included.
    pub lines: usize,
}

/// Every function in `ast` longer than `max` lines, in source order.
pub fn long_functions(ast: &syn::File, max: usize) -> Vec<LongFn> {
    let mut v = Finder { max, found: Vec::new() };
    v.visit_file(ast);
    v.found.sort_by_key(|f| f.line);
    v.found
}

struct Finder {
    max: usize,
    found: Vec<LongFn>,
}

impl Finder {
    fn measure(&mut self, sig: &syn::Signature, block: &syn::Block) {
        let line = sig.fn_token.span.start().line;
        let end = block.brace_token.span.close().end().line;
        let lines = end.saturating_sub(line) + 1;
        if lines > self.max {
            self.found.push(LongFn { name: sig.ident.to_string(), line, lines });
        }
    }
}

impl<'ast> Visit<'ast> for Finder {
    fn visit_item_fn(&mut self, i: &'ast syn::ItemFn) {
        if !is_cfg_test(&i.attrs) {
            self.measure(&i.sig, &i.block);
            syn::visit::visit_item_fn(self, i);
        }
    }

    fn visit_impl_item_fn(&mut self, i: &'ast syn::ImplItemFn) {
        if !is_cfg_test(&i.attrs) {
            self.measure(&i.sig, &i.block);
            syn::visit::visit_impl_item_fn(self, i);
        }
    }

    fn visit_trait_item_fn(&mut self, i: &'ast syn::TraitItemFn) {
        if is_cfg_test(&i.attrs) {
            return;
        }
        if let Some(block) = &i.default {
            self.measure(&i.sig, block);
        }
        syn::visit::visit_trait_item_fn(self, i);
    }

    fn visit_item_mod(&mut self, i: &'ast syn::ItemMod) {
        if !is_cfg_test(&i.attrs) {
            syn::visit::visit_item_mod(self, i);
        }
    }

    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        if !is_cfg_test(&i.attrs) {
            syn::visit::visit_item_impl(self, i);
        }
    }
}
