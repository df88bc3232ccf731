/*
 * config_internal.h - what the files of the config folder share and no
 * other folder needs: the table's size bound, a row's bit in
 * config_given_t, and the limits of --layers.  config_table.c holds the
 * option table, config.c parses and checks options against it,
 * config_help.c prints it as --help.
 */
#ifndef FTRAIN_CONFIG_INTERNAL_H
#define FTRAIN_CONFIG_INTERNAL_H

#include <stdint.h>

#include "config/config.h"

/* Rows the option table may have: one bit each in config_given_t (checked
 * where the table is defined); arrays sized per row use it. */
#define CONFIG_OPTIONS_MAX 64

/* --layers: the widest hidden layer, and how many there may be (the output
 * layer is one of the model's MODEL_MAX_LAYERS). */
#define LAYER_WIDTH_MAX 65536
#define HIDDEN_LAYERS_MAX (MODEL_MAX_LAYERS - 1)

/** @return row's bit in config_given_t: row must be a row of the table
 *  (config_options()). */
uint64_t config_row_bit(const config_option_t *row);

#endif
