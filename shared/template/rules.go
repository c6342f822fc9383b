package template

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// CheckRules evaluates the template's Rules against parameter values as
// CloudFormation does before it creates a stack: a rule whose condition
// holds (or that has none) must have every assertion true. It supports the
// rule functions the template uses: Fn::And, Fn::Or, Fn::Not, Fn::Equals,
// Fn::Contains and Ref.
func (t *Template) CheckRules(params map[string]string) error {
	for _, name := range slices.Sorted(maps.Keys(t.rules)) {
		rule := t.rules[name]
		if c := get(rule, "RuleCondition"); c != nil {
			ok, err := evalBool(c, params)
			if err != nil {
				return fmt.Errorf("rule %s: %w", name, err)
			}
			if !ok {
				continue
			}
		}
		for _, a := range seq(get(rule, "Assertions")) {
			ok, err := evalBool(get(a, "Assert"), params)
			if err != nil {
				return fmt.Errorf("rule %s: %w", name, err)
			}
			if !ok {
				return fmt.Errorf("rule %s failed: %s", name, scalar(get(a, "AssertDescription")))
			}
		}
	}
	return nil
}

// ruleFunc returns the function name and its argument of a rule
// expression, in long (Fn::Or: […]) or short (!Or […]) form.
func ruleFunc(n *yaml.Node) (string, *yaml.Node) {
	if n == nil {
		return "", nil
	}
	if strings.HasPrefix(n.Tag, "!") && !strings.HasPrefix(n.Tag, "!!") {
		return "Fn::" + strings.TrimPrefix(n.Tag, "!"), n
	}
	if n.Kind == yaml.MappingNode && len(n.Content) == 2 {
		return n.Content[0].Value, n.Content[1]
	}
	return "", nil
}

func evalBool(n *yaml.Node, params map[string]string) (bool, error) {
	fn, arg := ruleFunc(n)
	args := seq(arg)
	switch fn {
	case "Fn::And", "Fn::Or":
		if len(args) < 2 {
			return false, fmt.Errorf("%s needs at least two conditions", fn)
		}
		for _, a := range args {
			v, err := evalBool(a, params)
			if err != nil {
				return false, err
			}
			if fn == "Fn::Or" && v {
				return true, nil
			}
			if fn == "Fn::And" && !v {
				return false, nil
			}
		}
		return fn == "Fn::And", nil
	case "Fn::Not":
		if len(args) != 1 {
			return false, fmt.Errorf("Fn::Not needs one condition")
		}
		v, err := evalBool(args[0], params)
		return !v, err
	case "Fn::Equals":
		if len(args) != 2 {
			return false, fmt.Errorf("Fn::Equals needs two values")
		}
		a, err := evalString(args[0], params)
		if err != nil {
			return false, err
		}
		b, err := evalString(args[1], params)
		return a == b, err
	case "Fn::Contains":
		if len(args) != 2 {
			return false, fmt.Errorf("Fn::Contains needs a list and a value")
		}
		v, err := evalString(args[1], params)
		if err != nil {
			return false, err
		}
		for _, item := range seq(args[0]) {
			s, err := evalString(item, params)
			if err != nil {
				return false, err
			}
			if s == v {
				return true, nil
			}
		}
		return false, nil
	}
	return false, fmt.Errorf("line %d: unsupported rule function %q", lineOf(n), fn)
}

func evalString(n *yaml.Node, params map[string]string) (string, error) {
	if n == nil {
		return "", fmt.Errorf("missing value")
	}
	name := ""
	switch {
	case n.Tag == "!Ref":
		name = n.Value
	case n.Kind == yaml.MappingNode && len(n.Content) == 2 && n.Content[0].Value == "Ref":
		name = n.Content[1].Value
	case n.Kind == yaml.ScalarNode:
		return n.Value, nil
	default:
		return "", fmt.Errorf("line %d: unsupported rule value", n.Line)
	}
	v, ok := params[name]
	if !ok {
		return "", fmt.Errorf("rule value Ref %s: not a parameter", name)
	}
	return v, nil
}

func lineOf(n *yaml.Node) int {
	if n == nil {
		return 0
	}
	return n.Line
}
