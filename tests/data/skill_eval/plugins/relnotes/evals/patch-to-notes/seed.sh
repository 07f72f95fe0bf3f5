#!/bin/bash
set -euo pipefail
mkdir -p inputs
cat > inputs/delta.patch <<'PATCH'
diff --git a/cli.py b/cli.py
+    parser.add_argument("--limit", type=int, help="stop after N rows")
PATCH
printf '# Release notes\n\n## 4.1.0\n\n- First public release.\n' > RELEASE_NOTES.md
