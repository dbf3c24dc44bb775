"""A ``command`` runs through ``bash -c`` on purpose, but its hyperparameters never do.

PAI documents ``command="python train.py $PAI_USER_ARGS"``. Expanded by the shell, a
value with spaces, quotes or ``$()`` would be split into several arguments (``'a``,
``b;`` ...). So where ``$PAI_USER_ARGS`` or ``$SM_USER_ARGS`` (also ``${...}``) stands
unquoted as a word of its own, it is replaced by the expansion of a bash array holding
the arguments, which are handed to bash as positional parameters (never parsed as
shell text)::

    bash -c '_TRAINING_PAI_USER_ARGS=("${@:1:4}"); set --;
             python train.py "${_TRAINING_PAI_USER_ARGS[@]}"' bash --epochs 10 --note 'a b; $(id)'

Each hyperparameter then arrives as exactly one argument (PAI's ``--name value`` in
file order; for ``$SM_USER_ARGS`` sagemaker-training's sorted form) and nothing in a
value is executed. Inside double quotes (``"$PAI_USER_ARGS"``, ``eval "..."``) the
variable is left alone: its value quotes each element once (``shlex.split`` gives
the arguments back), so ``eval "python train.py $PAI_USER_ARGS"`` is safe as well.
A command that names neither runs unchanged.
"""

import re
import shlex

from training_runtime import hyperparameters as hps

_ARRAYS = {"PAI_USER_ARGS": "_TRAINING_PAI_USER_ARGS", "SM_USER_ARGS": "_TRAINING_SM_USER_ARGS"}
_REFERENCE = re.compile(r"\$(?:\{(PAI_USER_ARGS|SM_USER_ARGS)\}|(PAI_USER_ARGS|SM_USER_ARGS)(?![A-Za-z0-9_]))")
# What may stand right before / after a word in a simple command.
_WORD_BREAK = set(" \t\n;&|()<>")


def argv(command, hyperparameters):
    """``bash -c`` argv for ``command``: rewritten (with positional arguments) when it
    names ``$PAI_USER_ARGS`` / ``$SM_USER_ARGS`` as unquoted words, else as it is. Only
    the arrays the command names are passed: each hyperparameter once per reference form."""
    rewritten, used = rewrite(command)
    if not used:
        return ["bash", "-c", command]
    prologue, positional = "", []
    for name in sorted(used):  # PAI_USER_ARGS, then SM_USER_ARGS
        values = _values(name, hyperparameters)
        prologue += '%s=("${@:%d:%d}"); ' % (_ARRAYS[name], len(positional) + 1, len(values))
        positional += values
    return ["bash", "-c", prologue + "set --; " + rewritten, "bash"] + positional


def shown(command, hyperparameters):
    """The command as the user wrote it with the references it uses expanded, as the task
    log shows it (not the rewritten ``bash -c`` text with every argument behind it)."""
    return _replace(command, lambda name: " ".join(shlex.quote(a) for a in _values(name, hyperparameters)))[0]


def _values(name, hyperparameters):
    return hps.to_args(hyperparameters) if name == "PAI_USER_ARGS" else hps.sagemaker_args(hyperparameters)


def rewrite(command):
    """(command with the unquoted word references replaced, names replaced)."""
    return _replace(command, lambda name: '"${%s[@]}"' % _ARRAYS[name])


def _replace(command, replacement):
    out, used = [], set()
    i, quote = 0, None  # quote: None, "'" or '"'
    while i < len(command):
        char = command[i]
        if quote == "'":
            quote = None if char == "'" else quote
        elif char == "\\":
            out.append(command[i:i + 2])
            i += 2
            continue
        elif quote == '"':
            quote = None if char == '"' else quote
        elif char in "'\"":
            quote = char
        elif char == "$":
            match = _REFERENCE.match(command, i)
            if match and _stands_alone(command, i, match.end()):
                name = match.group(1) or match.group(2)
                used.add(name)
                out.append(replacement(name))
                i = match.end()
                continue
        out.append(char)
        i += 1
    return "".join(out), used


def _stands_alone(command, start, end):
    before = command[start - 1] if start > 0 else " "
    after = command[end] if end < len(command) else " "
    return before in _WORD_BREAK and after in _WORD_BREAK
