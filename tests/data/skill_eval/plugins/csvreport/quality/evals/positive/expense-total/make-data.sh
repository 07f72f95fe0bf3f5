#!/bin/bash
set -eu
mkdir -p data
printf 'category,amount\nrent,700\nfood,180\ntravel,50\n' > data/expenses.csv
