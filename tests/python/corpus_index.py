"""The tracer-breadth corpus: which tests cover which item of the tracer
issue. Each entry is "file.py" (every test in it) or "file.py::test_name";
tests/python/test_corpus_index.py checks that every entry exists and that
the corpus holds at least 150 distinct test functions."""

ITEMS = {
    "graph breaks resume in CPython (inlined calls, cells, loops, tracebacks)": [
        "test_graph_breaks.py",
        "test_errors.py::test_unsupported_code_breaks_the_graph",
        "test_errors.py::test_break_inside_inlined_helper_is_located_in_helper",
        "test_errors.py::test_disable_prevents_compiling_after_a_graph_break",
        "test_side_effects.py::test_stores_before_a_graph_break_happen_first",
        "test_side_effects.py::test_argument_mutation_across_a_graph_break",
        "stdlib/test_functools_model.py::test_partial_rebuilt_at_a_graph_break",
        "test_dynamic_shapes.py::test_graph_break_with_dynamic_sizes",
    ],
    "breaks inside with blocks and try blocks stay correct": [
        "test_language_control.py::test_no_graph_break_inside_a_try_block",
        "test_language_control.py::test_break_after_a_try_block",
        "test_language_control.py::test_trace_stopping_inside_autocast_leaves_it",
        "test_language_control.py::test_with_of_unmodelled_context_manager_stays_clean",
        "test_grad_mode_blocks.py::test_error_inside_block_restores_grad_mode",
    ],
    "every opcode handled or a clean break (reasons with locations)": [
        "test_errors.py::test_every_unsupported_reason_has_a_location",
        "test_errors.py::test_unsupported_fullgraph_raises_with_location",
        "test_language_control.py::test_locals_is_never_run_at_a_graph_break",
        "test_fuzz.py",
    ],
    "branches on Python values and tensor shapes": [
        "test_compile_functions.py::test_branch_on_shape",
        "test_corpus_language.py::test_branch_on_dtype_dim_and_shape",
        "test_graph_breaks.py::test_branch_explain_has_condition_graph_and_both_branches",
        "test_guards_recompile.py::test_changed_python_int_argument_recompiles",
        "test_guards_recompile.py::test_changed_python_value_argument_recompiles",
        "test_dynamic_shapes.py::test_branch_on_size_specializes_and_stays_correct",
    ],
    "for/while loops, break/continue, ModuleList/Sequential/ModuleDict": [
        "test_compile_functions.py::test_loops_over_python_values",
        "test_corpus_language.py::test_while_loop_over_python_counter",
        "test_corpus_language.py::test_for_over_tuple_and_dict_items",
        "test_corpus_language.py::test_break_and_continue_in_loops",
        "test_corpus_language.py::test_loop_over_module_list_sequential_and_dict",
        "test_corpus_language.py::test_reversed_and_zip_over_lists",
        "test_iteration_builtins.py",
        "test_compile_modules.py::test_library_modules",
    ],
    "closures and cells": [
        "test_corpus_language.py::test_closure_cells_read_and_written",
        "test_graph_breaks.py::test_breaks_in_frames_with_cells",
        "test_graph_breaks.py::test_cell_rebound_before_break_keeps_old_references",
        "test_guards_recompile.py::test_closure_value_change_is_used",
        "test_compile_functions.py::test_lambda_and_bound_method",
    ],
    "defaults, keyword-only, *args, **kwargs": [
        "test_compile_functions.py::test_compiled_function_defaults_and_kwargs",
        "test_compile_functions.py::test_varargs_and_kwargs",
        "test_corpus_language.py::test_keyword_only_defaults_varargs_and_kwargs",
        "test_compile_modules.py::test_module_with_multiple_inputs_and_kwargs",
    ],
    "comprehensions and unpacking": [
        "test_compile_functions.py::test_comprehensions_and_generators",
        "test_corpus_language.py::test_star_unpacking_and_nested_unpacking",
        "test_corpus_language.py::test_dict_and_set_comprehensions_and_set_methods",
        "test_iteration_builtins.py::test_generator_expressions_trace_fully",
    ],
    "list/dict/tuple/set methods": [
        "stdlib/test_builtins_model.py::test_container_methods",
        "stdlib/test_builtins_model.py::test_container_methods_write_back_to_the_callers_list",
        "test_corpus_language.py::test_list_and_tuple_methods",
        "test_corpus_language.py::test_dict_and_set_comprehensions_and_set_methods",
        "test_corpus_language.py::test_set_argument_read_and_changed",
        "test_corpus_language.py::test_set_returned_is_new_each_call",
    ],
    "builtins: isinstance, len, getattr, hasattr, min, max, sum, abs, range, sorted, any, all": [
        "stdlib/test_builtins_model.py",
        "test_corpus_language.py::test_sorted_any_all_min_max",
        "test_corpus_language.py::test_abs_sum_range_getattr_hasattr",
    ],
    "operator, math, functools and itertools modules": [
        "stdlib/test_operator_model.py",
        "stdlib/test_math_model.py",
        "stdlib/test_functools_model.py",
        "stdlib/test_itertools_model.py",
    ],
    "dataclasses, namedtuples, enums, properties, classmethod, staticmethod, super()": [
        "test_language_classes.py",
        "test_python_objects.py",
        "test_corpus_language.py::test_classmethod_staticmethod_property",
        "test_corpus_language.py::test_super_in_module_forward",
    ],
    "f-strings and formatting of constants": [
        "test_formatting.py",
        "test_corpus_language.py::test_fstring_of_shape_used_as_dict_key",
    ],
    "try/except/finally that does not raise (break or eager where it raises)": [
        "test_language_control.py::test_try_except_finally_traced_when_body_does_not_raise",
        "test_language_control.py::test_try_finally_runs_on_the_normal_path",
        "test_language_control.py::test_try_body_that_raises_runs_the_handler_eagerly",
        "test_language_control.py::test_try_in_inlined_callee",
        "test_corpus_language.py::test_try_except_that_does_not_raise",
    ],
    "match statements": [
        "test_language_control.py::test_match_patterns",
        "test_language_control.py::test_match_on_tensor_shapes",
        "test_language_control.py::test_match_class_pattern_on_tensor",
    ],
    "with blocks: no_grad, enable_grad, set_grad_enabled, autocast": [
        "test_grad_mode_blocks.py",
        "test_language_control.py::test_autocast_blocks_traced_with_autocast_dtypes",
        "test_language_control.py::test_autocast_graph_enters_and_leaves",
        "test_language_control.py::test_error_inside_autocast_block_restores_state",
    ],
    "data-dependent code breaks and stays correct (item, tolist, print, numpy, branches)": [
        "test_corpus_language.py::test_item_and_tolist_break_and_stay_correct",
        "test_corpus_language.py::test_branch_on_tensor_value_breaks_and_stays_correct",
        "test_corpus_language.py::test_numpy_breaks_and_stays_correct",
        "test_graph_breaks.py::test_break_matches_eager",
        "test_formatting.py::test_formatting_a_tensor_is_a_graph_break",
        "stdlib/test_math_model.py::test_math_of_a_tensor_breaks_as_data_dependent",
    ],
    "side effects replayed once: attributes, globals, list/dict arguments, in-place ops": [
        "test_side_effects.py",
        "test_compile_functions.py::test_side_effects_on_globals_and_objects_happen_once",
        "test_compile_functions.py::test_inplace_mutation_of_inputs_visible_to_caller",
        "test_compile_functions.py::test_views_see_later_mutations_and_setitem",
        "test_corpus_language.py::test_inplace_ops_on_inputs_match_eager_state",
        "test_compile_modules.py::test_inplace_parameter_update_seen",
        "test_compile_modules.py::test_buffer_update_seen",
        "test_compile_modules.py::test_forward_mutating_module_state",
        "test_compile_modules.py::test_batchnorm_running_stats_updated_like_eager",
    ],
    "dynamic=None: automatic dynamic shapes": [
        "test_dynamic_shapes.py",
        "test_leaks.py::test_dynamic_shapes_path_no_leak",
    ],
    "differential fuzzer": [
        "test_fuzz.py",
    ],
    "golden traces with graph breaks and resume functions": [
        "test_traces.py",
    ],
}
