"""pager: split sequences into numbered pages and render page footers."""

from pager.page import Page
from pager.paginator import InvalidPage, Paginator
from pager.render import render_footer, render_nav

__all__ = ["InvalidPage", "Page", "Paginator", "render_footer", "render_nav"]
