#!/bin/bash
set -eu
mkdir -p data
{ echo 'sku,amount'; for i in $(seq 1 42); do echo "sku-$i,1"; done; } > data/inventory.csv
