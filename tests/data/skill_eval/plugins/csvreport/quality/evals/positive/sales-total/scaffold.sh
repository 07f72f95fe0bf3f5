#!/bin/bash
set -eu
mkdir -p data
printf 'category,amount\nbooks,400\ngames,600\nmusic,250\n' > data/sales.csv
