"""Small helpers around flaky network calls."""
